"""Locust's web UI in Chromium: the start form's custom fields, swarms over HTTP and gRPC, bad values refused."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from trainserve.loadtest.options import FORM_LABELS
from trainserve.loadtest.webui import _camel
from tests.conftest import REPO_ROOT, free_port, stop_process, subprocess_env
from tests.loadtest.tiny_repo import MODEL

pytestmark = pytest.mark.slow


@contextmanager
def locust_ui(*args: str) -> Iterator[str]:
    """`locust -f loadtest/locustfile.py` as the README runs it (plus loopback and a port); its URL."""
    port = free_port()
    cmd = [sys.executable, "-m", "locust", "-f", "loadtest/locustfile.py", "--web-host", "127.0.0.1",
           "--web-port", str(port), *args]
    proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=subprocess_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(url + "/", timeout=2).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the Locust web UI did not start:\n" + (proc.stdout.read() or "")[-3000:])
                time.sleep(0.2)
        yield url
        state = json.load(urllib.request.urlopen(url + "/stats/requests", timeout=5))["state"]
        assert state != "running"
    finally:
        stop_process(proc)
        log = proc.stdout.read()
        proc.stdout.close()
    # a user-facing failure must not print a traceback per user
    assert "Traceback" not in log, log[-3000:]


def open_form(tab: Any, url: str) -> Any:
    page = tab.page
    page.goto(url + "/")
    page.get_by_text("Custom parameters").click()
    page.wait_for_selector("form [name=modelName][data-ts-label]")
    return page


def field(page: Any, dest: str) -> Any:
    return page.locator(f"form [name={_camel(dest)}]")


def start(page: Any, users: int = 2) -> None:
    page.fill("form [name=userCount]", str(users))
    page.fill("form [name=spawnRate]", str(users))
    page.get_by_role("button", name=re.compile("^start$", re.I)).click()


def refused(page: Any, url: str, sentence: str) -> None:
    """The form shows `sentence` and no test runs."""
    page.get_by_text(sentence, exact=False).first.wait_for()
    time.sleep(0.5)
    assert json.load(urllib.request.urlopen(url + "/stats/requests", timeout=5))["state"] == "ready"


def test_form_has_every_custom_field_labelled_and_editable(tab: Any) -> None:
    with locust_ui() as url:
        page = open_form(tab, url)
        for dest, label in FORM_LABELS.items():
            assert field(page, dest).count() == 1, f"the start form has no field {dest}"
            box = page.locator(".MuiFormControl-root", has=page.locator(f"[name={_camel(dest)}]"))
            assert box.locator("label").first.inner_text().replace("*", "").strip() == label, dest
            assert box.locator(".ts-help").inner_text().strip(), dest
            el = field(page, dest)
            assert el.is_editable(), dest
            if el.evaluate("e => e.tagName") == "SELECT":
                options = el.locator("option").all_inner_texts()
                el.select_option(options[-1])
                assert el.input_value() == options[-1]
            else:
                el.fill("7")
                assert el.input_value() == "7", dest
        assert "Slo P9" not in page.content()
        # the pickers, from the plain command: one user class ticked (HTTP: the URL's protocol), shapes
        ticked = [row.inner_text().strip() for row in page.locator("tr", has=page.locator("input:checked")).all()
                  if row.inner_text().strip().endswith("User")]
        assert ticked == ["TritonHttpUser"]
        shapes = page.locator("form [name=shapeClass] option").all_inner_texts()
        assert {"Default", "StepRamp", "PoissonRate"} <= set(shapes)
        assert not page.locator("form input[name=host]").is_visible()
        assert "no host" not in page.inner_text("body").lower()
        assert not tab.errors, tab.errors


def test_bad_values_are_refused_with_one_sentence(tab: Any, embedded_server: dict[str, str]) -> None:
    with locust_ui("--server-url", embedded_server["http"], "--model-name", MODEL) as url:
        page = open_form(tab, url)
        field(page, "batch_size").fill("0")
        start(page)
        refused(page, url, "Batch size 0 is not allowed: use >= 1.")
        field(page, "batch_size").fill("abc")
        start(page)
        refused(page, url, "Batch size must be a whole number, not 'abc'.")
        field(page, "batch_size").fill("1")
        field(page, "model_name").fill("no_such_model")
        start(page)
        refused(page, url, f"has no model 'no_such_model'; it serves {MODEL}")  # the models it has, listed
        # a gRPC URL with the HTTP class ticked: said in those words (not the HTTP parser's error)
        field(page, "model_name").fill(MODEL)
        field(page, "server_url").fill("grpc://" + embedded_server["grpc"])
        start(page)
        refused(page, url, "is a gRPC address, but the ticked user class TritonHttpUser speaks HTTP: tick "
                           "TritonGrpcUser instead")
        # nothing listens: in words, not "ConnectionRefusedError: [Errno 111]"
        field(page, "server_url").fill(f"127.0.0.1:{free_port()}")
        start(page)
        refused(page, url, "(nothing listens on that port)")
        field(page, "server_url").fill(embedded_server["http"])
        # both protocols ticked with one URL
        page.locator("tr", has_text="TritonGrpcUser").locator("input[type=checkbox]").click()
        field(page, "model_name").fill(MODEL)
        start(page)
        refused(page, url, "use both HTTP and gRPC")


def swarm(tab: Any, url: str, request_type: str) -> None:
    """Start from the form, wait for traffic, read the Statistics table: requests, no failures, RPS > 0."""
    page = open_form(tab, url)
    start(page)
    page.get_by_role("tab", name=re.compile("statistics", re.I)).click()
    table = page.locator("table", has_text="# Requests")
    headers = [h.strip() for h in table.locator("thead th").all_inner_texts()]
    col = {name: headers.index(name) for name in ("Type", "Name", "# Requests", "# Fails", "Current RPS")}
    deadline = time.monotonic() + 30
    while True:
        row = table.locator("tbody tr", has_text=f"{MODEL} b1")
        cells = row.first.locator("td").all_inner_texts() if row.count() else []
        if cells and int(cells[col["# Requests"]]) > 0 and float(cells[col["Current RPS"]]) > 0:
            break
        assert time.monotonic() < deadline, f"no traffic in the Statistics table: {cells}"
        time.sleep(0.5)
    assert cells[col["Type"]] == request_type
    assert int(cells[col["# Fails"]]) == 0, cells
    assert float(page.locator("table tbody tr", has_text="Aggregated").locator("td").nth(col["# Fails"])
                 .inner_text()) == 0
    page.get_by_role("button", name=re.compile("^stop$", re.I)).click()
    deadline = time.monotonic() + 15
    while json.load(urllib.request.urlopen(url + "/stats/requests", timeout=5))["state"] not in ("stopped", "ready"):
        assert time.monotonic() < deadline, "the test did not stop"
        time.sleep(0.3)
    assert not [e for e in tab.errors if "failed request" not in e], tab.errors


def test_swarm_over_http_from_the_form(tab: Any, embedded_server: dict[str, str]) -> None:
    with locust_ui("--server-url", embedded_server["http"], "--model-name", MODEL) as url:
        swarm(tab, url, "HTTP")


def test_swarm_over_grpc_from_the_form(tab: Any, embedded_server: dict[str, str]) -> None:
    # a grpc:// URL ticks the gRPC class by default
    with locust_ui("--server-url", "grpc://" + embedded_server["grpc"], "--model-name", MODEL) as url:
        swarm(tab, url, "gRPC")


def test_fields_come_in_the_order_a_person_fills_them_with_help_in_words(tab: Any) -> None:
    from trainserve.loadtest.options import FORM_GROUPS

    with locust_ui() as url:
        page = open_form(tab, url)
        order = [d for _, dests in FORM_GROUPS for d in dests]
        tops = [field(page, d).evaluate("e => e.closest('.MuiFormControl-root').getBoundingClientRect().top")
                for d in order]
        assert tops == sorted(tops), dict(zip(order, tops))
        helps = page.locator(".ts-help").all_inner_texts()
        assert len(helps) == len(FORM_LABELS) and not [h for h in helps if "--" in h], helps
        groups = [field(page, dests[0]).evaluate("e => e.closest('.MuiFormControl-root').dataset.tsGroup")
                  for _, dests in FORM_GROUPS]
        assert groups == [g for g, _ in FORM_GROUPS]
        assert not tab.errors, tab.errors


def test_the_form_keeps_the_last_test_after_new_and_a_reload_and_names_the_target(
        tab: Any, embedded_server: dict[str, str]) -> None:
    with locust_ui() as url:  # started with the defaults: Server URL 127.0.0.1:8000, no model
        page = open_form(tab, url)
        field(page, "server_url").fill(embedded_server["http"])
        field(page, "model_name").fill(MODEL)
        field(page, "batch_size").fill("2")
        start(page, users=1)
        # while it runs, the page names the server and the model (Locust's Host slot in the top bar)
        page.get_by_text(f"{embedded_server['http']} · {MODEL}").first.wait_for()
        page.get_by_role("button", name=re.compile("^stop$", re.I)).click()
        page.get_by_role("button", name=re.compile("^new$", re.I)).click()
        page.wait_for_selector("form [name=serverUrl][data-ts-label]", state="attached")
        assert field(page, "server_url").input_value() == embedded_server["http"]
        assert field(page, "model_name").input_value() == MODEL
        assert field(page, "batch_size").input_value() == "2"
        page.goto(url + "/")  # a reload: the stopped test's page, then New again
        page.get_by_role("button", name=re.compile("^new$", re.I)).click()
        page.wait_for_selector("form [name=serverUrl][data-ts-label]", state="attached")
        assert field(page, "server_url").input_value() == embedded_server["http"]
        assert field(page, "model_name").input_value() == MODEL
