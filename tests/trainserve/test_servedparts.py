"""A load record's typed served parts (trainserve/core/servedparts.py): written into the record as the report
reads it, read back with nothing lost, read as far as it goes when written before the parts were typed, and
refused when written by a newer schema."""

from __future__ import annotations

import json

import pytest

from tests.loadtest.parts import parts, probe, search, server_info, settings, step
from trainserve.core.errors import UserError
from trainserve.core.profile import ProfileRecord
from trainserve.core.served import (SERVED_SCHEMA_VERSION, Attribution, Bound, BoundKind, ClientCpu, Served,
                                    ServerProcess)
from trainserve.core.servedparts import HeldOut, LoadParts, RampStop, Repeat, Saturation
from trainserve.core.typedjson import from_json, to_json


def _full() -> LoadParts:
    figure = probe(1200.0, True, wall_start=10.0, wall_end=13.0, server_cpu_cores=1.5, frontend_cpu_cores=0.9,
                   system_cpu_percent=40.0, per_process_core_fraction={"w1": 0.4}, server={"requests": 3600})
    return parts(
        settings=settings(mode="search", scenario="Server", rate=900.0, server_pid=4242),
        server=server_info(frontends=2),
        search=search(capacity_req_s=1200.0, upper_req_s=1300.0, probes=[probe(1300.0, False, reasons=["p99"]),
                                                                         figure],
                      figure=figure, estimate={"users": 16, "requests_s": 1000.0}, percentiles_short=["p99.9"]),
        ramp=[step(1, 500.0, 2.0, client_cpu=ClientCpu(per_process_core_fraction={"local": 0.2}),
                   attribution=Attribution(latency_ms=2.0, client_ms=0.1, server_ms=1.0), device_busy_fraction=0.4,
                   bound=Bound(BoundKind.LOAD, "the offered load")),
              step(2, 900.0, 30.0, bound=Bound(BoundKind.SLO, "the ramp's stop"))],
        saturation=Saturation(users=1, requests_s=500.0, reason="p99 30 ms > 20 ms", stop=RampStop.SLO))


def _written(p: LoadParts) -> ProfileRecord:
    r = ProfileRecord(phase="infer", model="m", backend="onnxruntime", device="cpu", target="t")
    r.served = Served(bound=Bound(BoundKind.DEVICE, "the CPU: busy"),
                      server_process=ServerProcess(pid=4242, window_s=10.0, ticks=50, rss_max_bytes=1 << 28))
    p.write(r)
    return ProfileRecord.from_dict(json.loads(json.dumps(r.to_dict())))  # through the file's text


def test_every_part_survives_the_record_it_is_written_into() -> None:
    p = _full()
    back = _written(p)
    assert LoadParts.of(back) == p
    assert back.served.bound.kind is BoundKind.DEVICE and back.served.server_process.ticks == 50
    assert isinstance(LoadParts.of(back).saturation.stop, RampStop)


def test_the_json_keeps_the_shape_the_report_reads() -> None:
    back = _written(_full())
    x, s = back.extra, back.settings
    assert x["search"]["capacity_req_s"] == 1200.0 and x["search"]["figure"]["wall_start"] == 10.0
    assert x["ramp"][1]["bound"] == {"kind": "slo", "detail": "the ramp's stop"}
    assert x["saturation"]["users"] == 1 and x["server"]["frontends"] == 2
    assert (s["scenario"], s["mode"], s["slo_p99_ms"]) == ("Server", "search", 20.0)
    # a part that does not apply is left out of the record
    plain = _written(parts())
    assert not {"search", "ramp", "saturation"} & plain.extra.keys()


def test_a_record_of_a_newer_served_schema_is_refused_in_one_sentence() -> None:
    r = ProfileRecord(phase="infer", model="m", backend="onnxruntime", device="cpu", target="t")
    r.served = Served(schema_version=SERVED_SCHEMA_VERSION + 1)
    with pytest.raises(UserError, match="re-run `trainserve load`"):
        LoadParts.of(r)


def _legacy(served: Served | None) -> ProfileRecord:
    """A load record as written before the parts were typed: looser dicts, keys missing, one unknown."""
    r = ProfileRecord(phase="infer", model="m", backend="onnxruntime", device="cpu", target="t")
    r.served = served
    r.settings = {"mode": "ramp", "slo_p99_ms": 20.0, "retired_option": 3}
    r.extra = {"ramp": [{"users": 9, "requests_s": 6960.0, "mean_ms": 1.3, "bound": {"kind": "plateau", "detail": "x"},
                         "client_cpu": {"saturated": True}, "attribution": {"latency_ms": 1.3, "server_ms": 0.5}},
                        "not a step"],
               "saturation": {"users": 9, "requests_s": 6960.0, "reason": "throughput grew less than 5%"},
               "search": {"capacity_req_s": 1200.0, "lower_bound": False, "probes": [{"rate": 1200.0}]},
               "server": {"frontends": 4}, "repeats": [{"requests_s": 1.0}], "percentiles_short": ["p999_ms"]}
    return r


@pytest.mark.parametrize("served", [None, Served()], ids=["no served part", "schema 0"])
def test_a_record_written_before_the_parts_were_typed_is_read_as_far_as_it_goes(served: Served | None) -> None:
    p = LoadParts.of(_legacy(served))
    assert (p.settings.mode, p.settings.slo_p99_ms, p.settings.scenario) == ("ramp", 20.0, None)
    (step,) = p.ramp  # the step of another shape is dropped
    assert (step.users, step.p99_ms, step.bound.kind) == (9, None, BoundKind.PLATEAU)
    assert step.client_cpu.saturated and step.client_cpu.note == "" and step.attribution.server_ms == 0.5
    assert (p.saturation.users, p.saturation.stop) == (9, None)  # no stop was written: no word is read for it
    assert p.search.capacity_req_s == 1200.0 and p.search.probes[0].p99_ms is None and p.search.figure is None
    assert (p.server.frontends, p.server.metrics) == (4, None)
    assert p.repeats[0].requests_s == 1.0 and p.repeats[0].p99_ms is None and p.percentiles_short == ["p999_ms"]


def test_a_record_with_no_parts_reads_as_none_of_them() -> None:
    p = LoadParts.of(ProfileRecord(phase="infer", model="m", backend="onnxruntime", device="cpu", target="t"))
    assert (p.search, p.ramp, p.saturation, p.repeats, p.percentiles_short) == (None, [], None, [], [])
    assert p.settings.scenario is None and p.server.frontends is None


def test_a_step_the_report_withheld_figures_from_is_read_with_them() -> None:
    r = _written(_full())
    r.extra["ramp"][0]["p50_ms"] = None  # as the report's screen (trainserve/core/bounds.py) marks it
    r.extra["ramp"][0]["out_of_bounds"] = {"p50_ms": {"short": "out of bounds", "error": "faster than the limit"}}
    held = LoadParts.of(r).ramp[0].out_of_bounds
    assert held == {"p50_ms": HeldOut(short="out of bounds", error="faster than the limit")}
    assert to_json(LoadParts.of(r).ramp[0]) == r.extra["ramp"][0]  # the report's copy keeps its shape


def test_repeats_and_short_percentiles_survive_the_record() -> None:
    p = _full()
    p.percentiles_short = ["p999_ms"]
    p.repeats = [Repeat(requests_s=1.0, capacity_req_s=1200.0, p50_ms=1.0, p95_ms=2.0, p99_ms=3.0, p999_ms=4.0,
                        stable=True)]
    back = _written(p)
    assert LoadParts.of(back) == p
    assert back.extra["repeats"][0]["capacity_req_s"] == 1200.0 and back.extra["percentiles_short"] == ["p999_ms"]
    assert "repeats" not in _written(parts()).extra  # one run: no repeats to list


def test_a_part_of_another_shape_is_refused() -> None:
    with pytest.raises(ValueError, match="RampStop is one of"):
        from_json(Saturation, {"users": 1, "requests_s": 1.0, "reason": "x", "stop": "as before"})
    with pytest.raises(ValueError, match="Saturation needs the keys"):
        from_json(Saturation, {"users": 1, "requests_s": 1.0, "reason": "x"})
    with pytest.raises(ValueError, match="Bound.kind 'tired'"):
        Bound("tired", "x")  # type: ignore[arg-type]
    assert to_json(Bound(BoundKind.BUDGET, "x")) == {"kind": "budget", "detail": "x"}
