"""Physical bounds on measured figures: a figure beyond its bound is an error, never a result.

A bound broken means an assumption broke, not that the hardware outdid itself:
- MFU above 100%: the peak assumed (the math mode) or the FLOP count is wrong;
- a served p50 below the in-process p50 of the same model, device and batch: a server adds work
  to the bare model run, so the client or the clock measured something else;
- served throughput above the in-process best of the same model and device by more than the two
  measurements' spread: likewise (within the spread it is noise: the figure is kept, with a note);
- a load generator that used (nearly) a whole core: the client set the pace, so the throughput
  and latency are the client's, not the server's.

Checks are pure functions on plain numbers and on ProfileRecords. `withhold` moves a broken
figure out of a record (into `extra["out_of_bounds"]`, beside `validity.errors`) so that nothing
downstream can print it; the report shows the error, in red, where the number would be.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from trainserve.core.profile import ProfileRecord

MFU_MAX = 1.0
# Two separate measurements (in-process, then served) differ by run-to-run noise; a served figure
# is flagged only when it beats the in-process one by more than the two measurements' spread (each
# half the range of its last timing windows), and never by less than this share.
NOISE = 0.10  # the windows' own agreement rule (loadtest/windows.py): stable figures differ this much
# A load-generator process busy for this share of a core over the test (start-up included, so
# busier still while it ran) was saturated. loadtest warns from 0.9; from here the figure is void.
CLIENT_SATURATED_FRACTION = 0.95
LATENCY_FIELDS = ("p50_ms", "p90_ms", "p99_ms", "p999_ms", "mean_ms", "max_ms")
SPEED_FIELDS = ("throughput_samples_s", "requests_s")
OUT_OF_BOUNDS = "out_of_bounds"  # the key in ProfileRecord.extra (and in a ramp point) of withheld figures


@dataclass(frozen=True)
class Violation:
    """A figure beyond its physical bound: which figures to withhold, and why."""

    fields: tuple[str, ...]  # report keys: "mfu", "throughput_samples_s", "requests_s", "p50_ms", ...
    short: str  # a few words for a table cell, e.g. "MFU > 100%"
    message: str  # the broken assumption, in one sentence, without the withheld figure


@dataclass(frozen=True)
class Limit:
    """The in-process (bare model, no server) limits of one model on one device."""

    p50_ms_by_batch: dict[int, float]  # lowest in-process p50 per batch size, ms
    best_throughput_samples_s: float | None  # highest in-process throughput at any batch
    best_spread: float | None = None  # that point's windows: half their range over their mean (serve/model/inprocess_limits.py)
    best_point: str = ""  # which point, e.g. "batch 64 on 2 thread(s)"


@dataclass(frozen=True)
class Noted:
    """A served figure above its in-process bound by less than the two measurements' spread: kept, and said."""

    field: str  # "throughput_samples_s"
    message: str  # one sentence for the record's warnings


# --- the checks, on plain numbers -------------------------------------------------------------

def check_mfu(mfu: float | None, math_mode: str | None = None, device_name: str = "",
              peak_tflops: float | None = None) -> Violation | None:
    if mfu is None or mfu <= MFU_MAX:
        return None
    peak = f"the {math_mode or 'assumed'} peak" + (f" of {peak_tflops:g} TFLOP/s" if peak_tflops else "")
    where = f" for {device_name}" if device_name else ""
    return Violation(("mfu",), "MFU > 100%",
                     f"MFU above 100% of {peak}{where} is impossible: the math mode assumed for the peak "
                     "(e.g. fp32 where TF32 tensor cores ran) or the FLOP count is wrong")


def check_latency(served_p50_ms: float | None, limit_p50_ms: float | None, device: str,
                  batch: int) -> Violation | None:
    if served_p50_ms is None or limit_p50_ms is None or served_p50_ms >= limit_p50_ms * (1 - NOISE):
        return None
    return Violation(LATENCY_FIELDS, "p50 below in-process limit",
                     f"served p50 is below the in-process p50 of {limit_p50_ms:g} ms for the same model on "
                     f"{_dev(device)} at batch {batch}: a server cannot answer faster than the bare model runs, "
                     "so the latency was not measured end to end")


def allowance(served_spread: float | None, limit_spread: float | None) -> float:
    """How far above the in-process best a served throughput may land by noise alone: the two measurements'
    spreads added (a figure can read high by its own and the limit low by its), at least NOISE."""
    return max(NOISE, (served_spread or 0.0) + (limit_spread or 0.0))


def _spreads(served_spread: float | None, limit_spread: float | None) -> str:
    def pm(x: float | None) -> str:
        return "unknown" if x is None else f"±{x:.0%}"
    return f"in process {pm(limit_spread)}, served {pm(served_spread)}"


def check_throughput(served_samples_s: float | None, limit_samples_s: float | None, device: str,
                     served_spread: float | None = None, limit: Limit | None = None) -> Violation | None:
    if served_samples_s is None or limit_samples_s is None:
        return None
    limit_spread = limit.best_spread if limit else None
    allowed = allowance(served_spread, limit_spread)
    if served_samples_s <= limit_samples_s * (1 + allowed):
        return None
    where = f" ({limit.best_point})" if limit and limit.best_point else ""
    return Violation(SPEED_FIELDS, "above in-process limit",
                     f"served throughput is more than {served_samples_s / limit_samples_s - 1:.0%} above the "
                     f"in-process best of {limit_samples_s:,.0f} samples/s{where} for the same model on "
                     f"{_dev(device)}, beyond the two measurements' spread ({_spreads(served_spread, limit_spread)}; "
                     f"{allowed:.0%} allowed): a server cannot outrun the bare model, so requests were miscounted or "
                     "the limit was measured on other hardware")


def note_throughput(served_samples_s: float | None, limit: Limit | None, device: str,
                    served_spread: float | None = None) -> Noted | None:
    """A served throughput above the in-process best but within the spread: noise, kept, and the limit is then
    at least the served figure (the in-process measurement read low)."""
    best = limit.best_throughput_samples_s if limit else None
    if served_samples_s is None or best is None or served_samples_s <= best:
        return None
    if check_throughput(served_samples_s, best, device, served_spread, limit) is not None:
        return None
    allowed = allowance(served_spread, limit.best_spread)
    return Noted("throughput_samples_s",
                 f"served {served_samples_s:,.0f} samples/s is {served_samples_s / best - 1:.0%} above the in-process "
                 f"best of {best:,.0f} samples/s on {_dev(device)}, within the two measurements' spread "
                 f"({_spreads(served_spread, limit.best_spread)}; {allowed:.0%} allowed): noise, so the figure is "
                 f"kept and the bare model does at least {served_samples_s:,.0f} samples/s")


def served_spread(record: ProfileRecord) -> float | None:
    """Half the range of the requests/s of the windows a load figure comes from, over their mean."""
    extra = record.extra if isinstance(record.extra, dict) else {}
    windows = [w for w in extra.get("windows") or [] if isinstance(w, dict) and (w.get("requests") or 0) > 0]
    used = set((record.validity.stability or {}).get("windows_used") or [])
    rates = [float(w["requests_s"]) for w in windows
             if (not used or w.get("index") in used) and isinstance(w.get("requests_s"), (int, float))]
    return spread_of(rates)


def spread_of(values: list[float]) -> float | None:
    """Half the range of a measurement's windows over their mean: how far a second measurement may land from
    this one; the one definition of a spread for served and in-process figures alike (None below two windows)."""
    if len(values) < 2 or not sum(values):
        return None
    return (max(values) - min(values)) / 2 / (sum(values) / len(values))


def check_client(max_process_core_fraction: float | None) -> Violation | None:
    f = max_process_core_fraction
    if f is None or f < CLIENT_SATURATED_FRACTION:
        return None
    return Violation(SPEED_FIELDS + LATENCY_FIELDS, "client saturated",
                     f"a load-generator process used {f:.0%} of a core: the client, not the server, set the pace, "
                     "so throughput and latency are the client's; measure again with more --processes")


def _dev(device: str) -> str:
    return "the GPU" if device == "cuda" else "the CPU"


# --- limits from the in-process records -------------------------------------------------------

def is_limit(record: ProfileRecord) -> bool:
    """An in-process limit record: the bare model on onnxruntime, no server in between."""
    extra = record.extra if isinstance(record.extra, dict) else {}
    return record.phase == "infer" and (extra.get("limit") is True or (record.target or "").startswith("in-process"))


def limits_of(records: list[tuple[str, ProfileRecord]]) -> dict[tuple[str, str], Limit]:
    """{(model, device): Limit} from the limit records among `records` (model as model_key gives it)."""
    p50s: dict[tuple[str, str], dict[int, float]] = {}
    best: dict[tuple[str, str], ProfileRecord] = {}
    for source, r in records:
        if not (is_limit(r) or (source.startswith("limits/") and r.phase == "infer")):
            continue
        key = (model_key(r.model), r.device)
        p50 = r.speed.latency.p50_ms
        if p50 is not None:
            by_batch = p50s.setdefault(key, {})
            by_batch[r.batch_size] = min(p50, by_batch.get(r.batch_size, p50))
        x = r.speed.throughput_samples_s
        if x is not None and (key not in best or x > (best[key].speed.throughput_samples_s or 0.0)):
            best[key] = r
        p50s.setdefault(key, {})
    return {k: _limit(p50s[k], best.get(k)) for k in p50s}


def _limit(p50s: dict[int, float], best: ProfileRecord | None) -> Limit:
    if best is None:
        return Limit(p50s, None)
    extra = best.extra if isinstance(best.extra, dict) else {}
    spread = extra.get("spread")
    threads = (best.settings or {}).get("intra_op_threads")
    instances = best.concurrency if best.concurrency and best.concurrency > 1 else 0
    point = (f"batch {best.batch_size}" + (f" on {threads} thread(s)" if threads else "")
             + (f", {instances} instances at once" if instances else "")) if "sweep" in extra else ""
    return Limit(p50s, best.speed.throughput_samples_s,
                 float(spread) if isinstance(spread, (int, float)) else None, point)


# `trainserve export` also writes each device's model with batching off ("cnn_cpu_nobatch": max_batch_size 1,
# no dynamic_batching), so the report can set what dynamic batching buys beside it
NOBATCH_SUFFIX = "_nobatch"


def model_key(name: str) -> str:
    """The model a served name belongs to ("cnn_gpu" -> "cnn", "cnn_gpu_nobatch" -> "cnn"), as the report
    groups them."""
    name = name.rsplit("/", 1)[-1].removesuffix(NOBATCH_SUFFIX)
    for suffix in ("_cpu", "_gpu"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


# --- on records ---------------------------------------------------------------------------------

def check_record(record: ProfileRecord, limit: Limit | None = None) -> list[Violation]:
    """Every bound the record's own figures break (ramp points are checked by `withhold`)."""
    r = record
    found: list[Violation | None] = []
    if r.phase == "train":
        found.append(check_mfu(r.speed.mfu, r.settings.get("math_mode"), r.device_name, r.speed.peak_tflops))
    elif not is_limit(r):
        gen = r.extra.get("load_generator") if isinstance(r.extra, dict) else None
        found.append(check_client(gen.get("max_process_core_fraction") if isinstance(gen, dict) else None))
        if limit is not None:
            found.append(check_latency(r.speed.latency.p50_ms, limit.p50_ms_by_batch.get(r.batch_size),
                                       r.device, r.batch_size))
            found.append(check_throughput(r.speed.throughput_samples_s, limit.best_throughput_samples_s, r.device,
                                          served_spread(r), limit))
    return [v for v in found if v is not None]


def notes_of(record: ProfileRecord, limit: Limit | None) -> list[Noted]:
    """What a served record's figures say about its limits without breaking them (kept, and said)."""
    if limit is None or record.phase != "infer" or is_limit(record):
        return []
    found = [note_throughput(record.speed.throughput_samples_s, limit, record.device, served_spread(record))]
    return [n for n in found if n is not None]


def _check_point(point: dict[str, Any], record: ProfileRecord, limit: Limit | None) -> list[Violation]:
    gen = record.extra.get("load_generator")
    step = point.get("client_cpu")  # the step's own client CPU (core/served.py): a late step's saturation is its own
    fraction = max(step.get("per_process_core_fraction", {}).values(), default=None) if isinstance(step, dict) \
        else gen.get("max_process_core_fraction") if isinstance(gen, dict) else None
    found = [check_client(fraction)]
    if limit is None:
        return [v for v in found if v is not None]
    found += [check_latency(point.get("p50_ms"), limit.p50_ms_by_batch.get(record.batch_size), record.device,
                           record.batch_size),
             check_throughput(point.get("throughput_samples_s"), limit.best_throughput_samples_s, record.device,
                              None, limit)]
    return [v for v in found if v is not None]


def withhold(record: ProfileRecord, violations: list[Violation]) -> None:
    """Move each broken figure out of `record` into extra["out_of_bounds"] and name it in validity.errors.

    Idempotent: a figure already withheld stays withheld, and an error is listed once.
    """
    if not violations:
        return
    held = record.extra.setdefault(OUT_OF_BOUNDS, {})
    for v in violations:
        if v.message not in record.validity.errors:
            record.validity.errors.append(v.message)
        for f in v.fields:
            value = _get(record, f)
            if value is None and f in held:
                continue
            held[f] = {"value": value, "short": v.short, "error": v.message}
            _set(record, f, None)


def _get(r: ProfileRecord, f: str) -> Any:
    if f == "mfu":
        return r.speed.mfu
    if f in SPEED_FIELDS:
        return getattr(r.speed, f)
    return getattr(r.speed.latency, f)


def _set(r: ProfileRecord, f: str, value: Any) -> None:
    if f == "mfu":
        r.speed.mfu = value
    elif f in SPEED_FIELDS:
        setattr(r.speed, f, value)
    else:
        setattr(r.speed.latency, f, value)


def _withhold_point(point: dict[str, Any], violations: list[Violation]) -> None:
    held = point.setdefault(OUT_OF_BOUNDS, {})
    for v in violations:
        for f in v.fields:
            if f in point and f not in held:  # a report's copy: the raw value is not kept
                held[f] = {"short": v.short, "error": v.message}
                point[f] = None


def screen(records: list[tuple[str, ProfileRecord]]) -> list[ProfileRecord]:
    """Copies of `records` with every out-of-bound figure withheld (the inputs are left as they are).

    Limits come from the limit records among `records`; with none, only the checks that need no
    limit (MFU, client saturation) run.
    """
    limits = limits_of(records)
    out = []
    for _, rec in records:
        r = copy.deepcopy(rec)
        limit = limits.get((model_key(r.model), r.device))
        withhold(r, check_record(r, limit))
        for n in notes_of(r, limit):
            if n.message not in r.validity.warnings:
                r.validity.warnings.append(n.message)
        ramp = r.extra.get("ramp") if isinstance(r.extra, dict) and not is_limit(r) else None
        for p in ramp if isinstance(ramp, list) else []:
            if isinstance(p, dict):
                found = _check_point(p, r, limit)
                _withhold_point(p, found)
                for v in found:
                    if v.message not in r.validity.errors:
                        r.validity.errors.append(v.message)
        out.append(r)
    return out


def errors_of(record: ProfileRecord) -> dict[str, dict[str, str]]:
    """{field: {"short", "error"}} of the figures withheld from a screened record (a ramp step's: its RampStep's
    out_of_bounds, trainserve/core/servedparts.py)."""
    held = record.extra.get(OUT_OF_BOUNDS) if isinstance(record.extra, dict) else None
    if not isinstance(held, dict):
        return {}
    return {f: {"short": str(h.get("short", "out of bounds")), "error": str(h.get("error", ""))}
            for f, h in held.items() if isinstance(h, dict)}
