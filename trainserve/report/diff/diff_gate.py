"""The CI gate of `trainserve diff --fail-on`: thresholds on a figure's change, breached only beyond the noise.

    server_capacity<-10%,p99>+20%

fails when a Server capacity fell by more than 10%, or a p99 rose by more than 20%, and that change is beyond
the noise (report/diff/run_diff.py). A name applies to that figure wherever both runs have it (every model, device
and scenario); `cpu.p99` or `Server.p99` narrows it to one device or scenario.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from trainserve.core.errors import UserError
from trainserve.report.diff.run_diff import KINDS, SCENARIO_ORDER, Change, Diff

SCOPES = ("cpu", "cuda", *SCENARIO_ORDER)

_RULE = re.compile(r"^(?:(?P<scope>[A-Za-z_]+)\.)?(?P<name>[a-z_0-9]+)\s*(?P<op>[<>])\s*(?P<pct>[+-]?\d+(?:\.\d+)?)\s*%$")


@dataclass(frozen=True)
class Threshold:
    """One rule: figure `name` (in `scope`, a device or scenario, when given) past `pct` % in the `op` direction."""
    name: str
    op: str  # "<": fails below pct; ">": fails above pct
    pct: float
    scope: str | None = None

    def __str__(self) -> str:
        scope = f"{self.scope}." if self.scope else ""
        return f"{scope}{self.name}{self.op}{self.pct:+g}%"

    def applies(self, c: Change) -> bool:
        return c.name == self.name and self.scope in (None, c.device, c.scenario)

    def breached_by(self, c: Change) -> bool:
        if not self.applies(c) or not c.beyond_noise or c.change_pct is None:
            return False
        return c.change_pct < self.pct if self.op == "<" else c.change_pct > self.pct


def parse_fail_on(text: str) -> list[Threshold]:
    """'server_capacity<-10%,p99>+20%' as thresholds; a UserError naming the rule that does not parse."""
    out = []
    for rule in (r.strip() for r in text.split(",")):
        if not rule:
            continue
        m = _RULE.match(rule)
        if m is None:
            raise UserError(f"--fail-on rule {rule!r} does not parse; write NAME<-PCT% or NAME>+PCT%, e.g. "
                            "server_capacity<-10%,p99>+20%")
        if m["name"] not in KINDS:
            raise UserError(f"--fail-on names an unknown figure {m['name']!r}; known: {', '.join(KINDS)}")
        if m["scope"] is not None and m["scope"] not in SCOPES:
            raise UserError(f"--fail-on rule {rule!r} narrows to {m['scope']!r}, neither a device nor a scenario; "
                            f"known: {', '.join(SCOPES)}")
        out.append(Threshold(m["name"], m["op"], float(m["pct"]), m["scope"]))
    if not out:
        raise UserError("--fail-on has no rule; write e.g. server_capacity<-10%,p99>+20%")
    return out


def breaches(diff: Diff, thresholds: list[Threshold]) -> list[str]:
    """One sentence per figure that moved past a threshold beyond the noise."""
    out = []
    for t in thresholds:
        for c in diff.changes:
            if t.breached_by(c):
                out.append(f"{c.model} {c.device} {c.scenario} {c.name}: {c.change_pct:+.1f}% "
                           f"({c.a:.4g} -> {c.b:.4g} {c.unit}, beyond the noise by {c.method}) breaks {t}")
    return out
