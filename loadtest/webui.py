"""Locust's web UI, fitted to this load test: the full start form from the plain command, and form checks.

`install(environment, web_ui)` (from the locustfile's init, web UI only) does four things:
- turns on the user-class and load-shape pickers, so `locust -f loadtest/locustfile.py` shows them;
- checks a start (POST /swarm) before Locust sees it: every custom field parses and is in range, one
  protocol is in use, and that server answers with that model. A bad value gets one sentence back
  in the form and nothing starts (Locust itself answers "abc" with a 500, and starts batch 0);
- gives the custom fields real labels and help text, ticks only the user class that matches the
  server URL's protocol, and hides Locust's Host field (unused: users read the Server URL field),
  by a small script added to the page (Locust's form builds labels from option names: "Slo P9 9Ms");
- sets the checked values itself, so a field whose name Locust's form mangles still arrives
  (the form posts slo_p99_ms as "slo_p9_9ms").
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from trainserve.loadtest.model_info import (
    fetch_model_info,  # tritonclient: only when a start is checked
)
from trainserve.loadtest.options import (
    FORM_GROUPS,
    FORM_HELP,
    FORM_LABELS,
    LoadOptions,
    OptionError,
    protocol_of,
)

CLASS_PROTOCOL = {"TritonHttpUser": "http", "TritonGrpcUser": "grpc"}  # the others use the Protocol field
SERVER_CHECK_TIMEOUT_S = 3.0


def posted_name(dest: str) -> str:
    """The name Locust's form posts a field under: its camelCase form turned back to snake_case."""
    camel = re.sub(r"_([a-z0-9])", lambda m: m.group(1).upper(), dest)
    if camel[0].isupper():
        return camel
    return re.sub(r"([a-z0-9])([A-Z0-9])", r"\1_\2", camel).lower()


def _camel(dest: str) -> str:
    return re.sub(r"_([a-z0-9])", lambda m: m.group(1).upper(), dest)


def form_fields(parser_actions: Mapping[str, Any]) -> dict[str, Any]:
    """The custom fields of the form: dest -> argparse action (only those with a label)."""
    return {dest: a for dest, a in parser_actions.items() if dest in FORM_LABELS}


def check_form(form: Mapping[str, str], user_classes: list[str], shape: str, current: Any,
               actions: Mapping[str, Any]) -> tuple[dict[str, Any], str | None]:
    """Parse and check the custom fields of a start; (typed values, None) or ({}, one sentence)."""
    values: dict[str, Any] = {}
    for dest, action in actions.items():
        raw = form.get(posted_name(dest), form.get(dest))
        if raw is None:
            continue
        label = FORM_LABELS[dest]
        kind = action.type
        try:
            values[dest] = kind(raw.strip()) if kind in (int, float) else raw.strip()
        except ValueError:
            what = "a whole number" if kind is int else "a number"
            return {}, f"{label} must be {what}, not {raw!r}."
    merged = {**vars(current), **values}
    try:
        opts = LoadOptions.from_parsed(_Namespace(merged))
    except OptionError as e:
        label = FORM_LABELS.get(e.name, e.name)
        return {}, f"{label} {e.value!r} is not allowed: use {e.allowed}."
    if not values:  # editing a running test: only Locust's own fields changed
        return values, None
    protocols = {CLASS_PROTOCOL.get(c, opts.protocol) for c in user_classes} if shape == "Default" \
        else {opts.protocol}
    if len(protocols) > 1:
        return {}, ("The ticked user classes use both HTTP and gRPC, but there is one Server URL: "
                    "tick the classes of one protocol.")
    protocol = protocols.pop() if protocols else opts.protocol
    given = str(merged.get("server_url") or "")  # as typed: LoadOptions keeps HOST:PORT only
    said = _scheme_protocol(given)
    if said and said != protocol:  # a grpc:// URL with the HTTP class ticked: say so, not the parser's error
        speaks = {"http": "HTTP", "grpc": "gRPC"}
        ticked = [c for c in user_classes if CLASS_PROTOCOL.get(c) == protocol] if shape == "Default" else []
        who = f"the ticked user class {ticked[0]}" if ticked else f"the Protocol field ({protocol})"
        fix = (f"tick {next(c for c, p in CLASS_PROTOCOL.items() if p == said)} instead" if ticked
               else f"set Protocol to {said}")
        return {}, (f"The Server URL {given} is a {speaks[said]} address, but {who} speaks "
                    f"{speaks[protocol]}: {fix}, or give an {'http' if protocol == 'http' else 'grpc'}:// URL.")

    try:
        fetch_model_info(opts.server_url, opts.model_name, protocol, timeout_s=SERVER_CHECK_TIMEOUT_S)
    except Exception as e:  # UserError: server down, model unknown; one sentence already
        text = str(e).replace("fix --url", "fix the Server URL").replace("pass --url HOST:PORT",
                                                                          "use HOST:PORT")
        return {}, text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")
    return values, None


def _scheme_protocol(url: str) -> str | None:
    """The protocol a URL names by its scheme, or None when it names none."""
    if url.startswith("grpc://"):
        return "grpc"
    if url.startswith(("http://", "https://")):
        return "http"
    return None


class _Namespace:
    def __init__(self, d: dict[str, Any]) -> None:
        self.__dict__.update(d)


def _script(labels: dict[str, dict[str, str]], pick: str) -> str:
    """Relabel the custom fields, add their help, put them in FORM_GROUPS' order under group headings, keep the
    last test's values (Stop -> New, and a reload, show them again), tick only `pick` in the class picker,
    hide Host."""
    return """<script>(() => {
const FIELDS = %s, PICK = %s, KEY = "trainserve-form";
const stored = () => { try { return JSON.parse(localStorage.getItem(KEY) || "{}"); } catch (e) { return {}; } };
// the form posts what React holds: set a value through the input's own setter, then tell React
function restore(el, value) {
  if (value === undefined || el.value === value || el.type === "hidden" || el.type === "checkbox") return;
  Object.getOwnPropertyDescriptor(HTMLInputElement.prototype, "value").set.call(el, value);
  el.dispatchEvent(new Event("input", {bubbles: true}));
}
document.addEventListener("submit", ev => {  // a start: remember every custom field for the next form
  const keep = {};
  for (const name of Object.keys(FIELDS)) {
    const el = ev.target.querySelector(`[name="${name}"]`);
    if (el) keep[name] = el.value;
  }
  localStorage.setItem(KEY, JSON.stringify(keep));
  // Locust's top bar shows the form's Host (hidden, unused): name the server and model there instead
  const host = ev.target.querySelector('input[name="host"]');
  if (host && keep.serverUrl !== undefined) {
    Object.getOwnPropertyDescriptor(HTMLInputElement.prototype, "value").set.call(
      host, `${keep.serverUrl} · ${keep.modelName || ""}`);
  }
}, true);
function fix() {
  const last = stored();
  for (const [name, f] of Object.entries(FIELDS)) {
    const el = document.querySelector(`form [name="${name}"]`);
    if (!el || el.dataset.tsLabel) continue;
    const box = el.closest(".MuiFormControl-root");
    if (!box) continue;
    el.dataset.tsLabel = "1";
    restore(el, last[name]);
    // CSS order, not moved nodes (React owns them): the fields follow FORM_GROUPS after Locust's own
    if (box.parentElement && getComputedStyle(box.parentElement).display !== "flex") {
      box.parentElement.style.display = "flex";
      box.parentElement.style.flexDirection = "column";
    }
    box.style.order = String(100 + f.order);
    if (f.group) box.dataset.tsGroup = f.group;
    el.setAttribute("aria-description", f.help);
    for (const node of box.querySelectorAll("label, legend > span")) {
      const text = [...node.childNodes].find(n => n.nodeType === Node.TEXT_NODE);
      if (text) text.nodeValue = f.label;  // only the text: React keeps its own nodes (the required "*")
    }
    const help = document.createElement("p");
    help.className = "MuiFormHelperText-root ts-help";
    help.style.cssText = "margin:4px 14px 0;font-size:0.75rem;opacity:0.7";
    help.textContent = f.help;
    box.appendChild(help);
  }
  const host = document.querySelector('form input[name="host"]');
  const hostBox = host && host.closest(".MuiFormControl-root");
  if (hostBox && hostBox.style.display !== "none") hostBox.style.display = "none";
  // a new start form (also the one after "New") ticks every class: leave only PICK ticked, once
  const rows = [...document.querySelectorAll("tr")].filter(r => /^\\w+User$/.test(r.textContent.trim()));
  const table = rows.length && rows[0].closest("table");
  if (table && !table.dataset.tsPicked) {
    table.dataset.tsPicked = "1";
    for (const row of rows) {
      const cb = row.querySelector('input[type="checkbox"]');
      if (cb && cb.checked !== (row.textContent.trim() === PICK)) cb.click();
    }
  }
}
const style = document.createElement("style");
style.textContent = "[data-ts-group]::before{content:attr(data-ts-group);display:block;font-weight:600;" +
  "margin:12px 0 6px;font-size:0.9rem}";
document.head.appendChild(style);
new MutationObserver(fix).observe(document.documentElement, {childList: true, subtree: true});
document.addEventListener("DOMContentLoaded", fix);
})();</script>""" % (json.dumps(labels), json.dumps(pick))


def install(environment: Any, web_ui: Any) -> None:
    """Fit the web UI (see the module docstring); call from events.init when `web_ui` is not None."""
    from flask import jsonify, request
    from locust import argument_parser

    opts = environment.parsed_options
    opts.class_picker = True
    web_ui.userclass_picker_is_active = True
    environment.shape_class = None  # the picker's "Default": plain users until a shape is picked
    actions = form_fields(argument_parser.get_parser().args_included_in_web_ui)
    order = [d for _, dests in FORM_GROUPS for d in dests]
    firsts = {dests[0]: group for group, dests in FORM_GROUPS}
    labels = {_camel(d): {"label": FORM_LABELS[d], "help": FORM_HELP.get(d, a.help or ""),
                          "order": order.index(d) if d in order else len(order), "group": firsts.get(d, "")}
              for d, a in actions.items()}
    pick = "TritonGrpcUser" if protocol_of(opts.server_url, opts.protocol) == "grpc" else "TritonHttpUser"
    script = _script(labels, pick)

    update = web_ui.update_template_args

    def update_template_args() -> None:
        update()
        web_ui.template_args["missing_host_warning"] = False  # the Host field is hidden: users read Server URL

    web_ui.update_template_args = update_template_args

    @web_ui.app.before_request
    def _check_start() -> Any:
        if request.method != "POST" or request.endpoint != "locust.swarm":
            return None
        classes = request.form.getlist("user_classes")
        values, problem = check_form(request.form, classes, request.form.get("shape_class", "Default"),
                                     environment.parsed_options, actions)
        if problem:
            return jsonify({"success": False, "message": problem, "host": environment.host})
        for dest, value in values.items():
            setattr(environment.parsed_options, dest, value)
        return None

    @web_ui.app.after_request
    def _name_the_target(response: Any) -> Any:
        """A started test names its server and model where Locust's top bar shows the (unused) Host."""
        if request.endpoint == "locust.swarm" and response.is_json and (response.get_json() or {}).get("success"):
            o = environment.parsed_options
            environment.host = f"{o.server_url} · {o.model_name}"
            body = response.get_json()
            body["host"] = environment.host
            response.set_data(json.dumps(body))
        return response

    @web_ui.app.after_request
    def _add_script(response: Any) -> Any:
        if request.endpoint == "locust.index" and response.mimetype == "text/html" and not response.direct_passthrough:
            page = response.get_data(as_text=True)
            response.set_data(page.replace("</head>", script + "</head>", 1))
        return response
