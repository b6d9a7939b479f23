"""The dashboard (``/ui/``) in a real headless Chromium driven by Playwright.

A real ``gpuplace serve`` process on the PAI cluster (SQLite, API keys on, no model registered: the
heuristic answers) is given its state through the REST API: two queues with GPU quotas, jobs running in
them, one waiting over its queue's quota and one that can never fit (8 T4 GPUs, on machines of 2), jobs
placed directly (on half a GPU, on a quarter, a distributed one with a parameter server); then each view
is opened and what it shows is checked against what the API answers. A second service, in this process,
has reads protected and a model that estimates durations and GPU usage: the page asks for the key before
it shows anything, and the model view shows the recent error and drift of completed jobs' estimates
against the version's training metrics.

Chromium is ``/usr/bin/chromium`` (Debian's package; ``.ci/chromium.sh`` installs it), or
``GPUPLACE_CHROMIUM``. Without it the tests are skipped, unless ``GPUPLACE_REQUIRE_BROWSER`` is set:
then they fail. A screenshot of each view goes to the test's temporary folder, and to
``GPUPLACE_UI_SCREENSHOTS`` if set.
"""

from __future__ import annotations

import math
import os
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest
import uvicorn

from placement import load_cluster
from service.estimator import EstimatorHolder
from service.http.app import create_app
from service.runtime import Runtime
from service.settings import Settings
from service.store import MemoryStore
from tests.service.conftest import API_KEY, Server, free_port, server_env
from tests.service.test_dashboard_api import Registry

if TYPE_CHECKING:  # Playwright itself is imported once the browser is known to be there
    from playwright.sync_api import Browser, Page

CHROMIUM = Path(os.environ.get("GPUPLACE_CHROMIUM", "/usr/bin/chromium"))
KEY = {"X-API-Key": API_KEY}
WAIT_MS = 90_000
"""Playwright's deadline for anything to appear: generous, a loaded two-core machine renders 1,897
machines slowly; an answer that comes sooner is taken at once."""
QUEUES = {"queues": [{"name": "research", "quota": {"gpus": 4}}, {"name": "prod", "quota": {"gpus": 40}}]}


def _require_browser() -> None:
    required = bool(os.environ.get("GPUPLACE_REQUIRE_BROWSER"))
    missing = None
    if not CHROMIUM.exists():
        missing = f"no Chromium at {CHROMIUM} (install Debian's chromium: .ci/chromium.sh; or set GPUPLACE_CHROMIUM)"
    else:
        try:
            import playwright.sync_api  # noqa: F401
        except ImportError as exc:
            missing = f"Playwright is not installed ({exc})"
    if missing is not None:
        if required:
            pytest.fail(f"GPUPLACE_REQUIRE_BROWSER is set: {missing}")
        pytest.skip(missing)


@pytest.fixture(scope="module", autouse=True)
def _chromium_first() -> None:
    """Skipped (or failed) before a server is started for nothing."""
    _require_browser()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=WAIT_MS)
    with sync_playwright() as driver:
        launched = driver.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    opened = context.new_page()
    opened.set_default_timeout(WAIT_MS)
    problems: list[str] = []
    opened.on("pageerror", lambda error: problems.append(str(error)))
    yield opened
    context.close()
    assert not problems, f"the page raised: {problems}"


def screenshot(page: Page, name: str, folder: Path) -> Path:
    """The page as shown, into ``folder``, and into ``GPUPLACE_UI_SCREENSHOTS`` if set."""
    path = folder / f"dashboard-{name}.png"
    page.screenshot(path=str(path))
    if wanted := os.environ.get("GPUPLACE_UI_SCREENSHOTS"):
        Path(wanted).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, Path(wanted) / path.name)
    assert path.stat().st_size > 10_000
    return path


# ---- a real server with realistic state ---------------------------------------------------------------

def task(gpu: float, instances: int = 1, cpu_cores: float = 4, mem_gib: float = 16, **extra: Any) -> dict[str, Any]:
    return {"instances": instances, "gpu": gpu, "cpu_cores": cpu_cores, "mem_gib": mem_gib, **extra}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, httpx.Client]]:
    """The PAI cluster with queues, running, waiting and directly placed jobs (the heuristic answering)."""
    home = tmp_path_factory.mktemp("dashboard")
    server = Server(server_env(home, f"sqlite:///{home / 'state.db'}")).start()
    with httpx.Client(base_url=server.url, headers=KEY, timeout=60) as http:
        assert http.put("/v1/queues", json=QUEUES).status_code == 200
        for job_id, queue, tasks, expected in [
                ("research-1", "research", [task(1, instances=4)], "running"),
                ("research-2", "research", [task(1, instances=2)], "pending"),  # over the quota of 4
                ("prod-train", "prod", [task(8, instances=2, cpu_cores=32, mem_gib=256, gpu_types=["V100"])],
                 "running"),
                ("prod-eval", "prod", [task(1, instances=2, gpu_types=["P100"])], "running"),
                ("prod-huge", "prod", [task(8, gpu_types=["T4"])], "pending")]:  # a T4 machine has 2
            answer = http.post("/v1/jobs", json={"job_id": job_id, "queue": queue, "user": "team-" + queue,
                                                 "tasks": tasks})
            assert answer.status_code == 202 and answer.json()["state"] == expected, answer.text
        for job_id, tasks in [("frac-1", [task(0.5, gpu_types=["T4"])]), ("frac-2", [task(0.25, gpu_types=["T4"])]),
                              ("dist-1", [task(0, cpu_cores=8, role="ps"), task(2, instances=4, cpu_cores=8)]),
                              *((f"train-{i}", [task(1 + i % 2) if i % 3 else task(4, gpu_types=["V100", "MISC"])])
                                for i in range(12))]:
            decision = http.post("/v1/place", json={"job_id": job_id, "user": "u1", "tasks": tasks}).json()
            assert decision["verdict"] == "placed" and decision["committed"], decision
        yield server.url, http
    server.stop()


def test_cluster_view_shows_every_machine_and_each_gpus_shares(served: tuple[str, httpx.Client], page: Page,
                                                              tmp_path: Path) -> None:
    from playwright.sync_api import expect

    url, http = served
    cluster = http.get("/v1/cluster").json()
    gpus = http.get("/v1/cluster/gpus").json()
    page.goto(f"{url}/ui/")
    expect(page.locator('#cluster-summary [data-stat="machines"]')).to_have_attribute("data-value",
                                                                                      str(cluster["machines"]))
    assert cluster["machines"] == 1897 == page.locator(".machine").count()
    expect(page.locator('#cluster-summary [data-stat="gpus"]')).to_have_attribute("data-value", str(cluster["gpus"]))
    expect(page.locator('#cluster-summary [data-stat="running"]')).to_have_attribute(
        "data-value", str(cluster["running_jobs"]))

    # half a GPU: a bar filled to its share, and the share in words once the machine is chosen
    instance = http.get("/v1/jobs/frac-1").json()["allocation"]["instances"][0]
    machine, gpu = instance["machine"], instance["gpus"][0]
    on_gpu = next(m for m in gpus["machines"] if m["name"] == machine)["gpu_milli"][gpu]
    bar = page.locator(f'.machine[data-machine="{machine}"] .gpu[data-gpu="{gpu}"]')
    expect(bar).to_have_attribute("data-milli", str(on_gpu))
    assert bar.locator('.seg[data-job="frac-1"]').evaluate("el => el.style.height") == "50%"
    page.locator(f'.machine[data-machine="{machine}"]').click()
    row = page.locator(f'#machine-gpus tr[data-gpu="{gpu}"]')
    expect(row.locator("td.share")).to_contain_text(f"{on_gpu / 1000:.2f} of 1")
    expect(row).to_contain_text("frac-1 0.50")
    screenshot(page, "cluster", tmp_path)

    # only the machines in use, coloured by GPU state; then one job's machines
    in_use = [m for m in gpus["machines"] if m["jobs"]]
    assert len(in_use) == len({i["machine"] for j in http.get("/v1/jobs", params={"state": "running"}).json()["jobs"]
                               for i in http.get(f"/v1/jobs/{j['job_id']}").json()["allocation"]["instances"]})
    page.locator("#cluster-in-use").check()
    expect(page.locator(".machine")).to_have_count(len(in_use))
    page.evaluate("window.scrollTo(0, 0)")
    screenshot(page, "cluster-in-use", tmp_path)
    page.locator("#cluster-colour").select_option("state")
    expect(page.locator(f'.machine[data-machine="{machine}"] .gpu.partial')).to_have_count(1)
    assert page.locator(f'.machine[data-machine="{machine}"] .gpu.partial .seg').first.evaluate(
        "el => getComputedStyle(el).backgroundColor") == "rgb(227, 155, 45)"  # --partial
    dist = {i["machine"] for i in http.get("/v1/jobs/dist-1").json()["allocation"]["instances"]}
    page.locator("#cluster-filter").fill("dist-1")
    expect(page.locator(".machine")).to_have_count(len(dist))


def test_jobs_view_says_why_each_pending_job_waits_and_follows_a_job(served: tuple[str, httpx.Client], page: Page,
                                                                     tmp_path: Path) -> None:
    from playwright.sync_api import expect

    url, http = served
    waiting = {w["job_id"]: w for w in http.get("/v1/queues/waiting").json()["waiting"]}
    assert waiting["research-2"]["reason"] == "over-quota" and waiting["prod-huge"]["reason"] == "can-never-fit"
    page.goto(f"{url}/ui/#jobs")
    for job_id in ("research-1", "prod-train", "frac-1", "dist-1"):
        expect(page.locator(f'#running-table tr[data-job="{job_id}"]')).to_have_count(1)
    expect(page.locator('#pending-table tr[data-job="research-2"] .why')).to_contain_text("over-quota")
    never = page.locator('#pending-table tr[data-job="prod-huge"] .why')
    expect(never).to_contain_text("can-never-fit")
    expect(never).to_contain_text(waiting["prod-huge"]["details"][0])

    page.locator('#pending-table a:text-is("research-2")').click()
    expect(page.locator("#job-waiting")).to_contain_text("over-quota")
    for detail in waiting["research-2"]["details"]:
        expect(page.locator("#job-waiting")).to_contain_text(detail)
    expect(page.locator("#job-events li").first).to_contain_text("submitted to queue 'research'")

    # live: a job placed now shows up without a reload, and the job opened follows its own events
    page.goto(f"{url}/ui/#jobs/frac-1")
    expect(page.locator("#job-detail .allocation td.share")).to_have_text("0.50 of each")
    assert http.post("/v1/place", json={"job_id": "live-1", "tasks": [task(1)]}).json()["committed"]
    expect(page.locator('#running-table tr[data-job="live-1"]')).to_have_count(1)
    page.goto(f"{url}/ui/#jobs/research-2")
    expect(page.locator('#job-detail[data-job="research-2"] #job-events li')).to_have_count(1)
    expect(page.locator('#job-events li[data-state="pending"]')).to_have_count(1)
    assert http.post("/v1/jobs/research-1/release").json()["released"]  # the quota frees: research-2 starts
    expect(page.locator('#job-events li[data-state="running"]')).to_have_count(1)
    expect(page.locator("#job-detail .badge.state").first).to_have_text("running")
    expect(page.locator('#running-table tr[data-job="research-2"]')).to_have_count(1)
    expect(page.locator('#pending-table tr[data-job="research-2"]')).to_have_count(0)
    screenshot(page, "jobs", tmp_path)


def test_queues_view_shows_each_queues_quota_usage_and_pending_as_the_api(served: tuple[str, httpx.Client],
                                                                         page: Page, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    url, http = served
    page.goto(f"{url}/ui/#queues")
    expect(page.locator('#queues-table tr[data-queue="prod"]').first).to_be_visible()
    answer = http.get("/v1/queues").json()
    assert {q["name"] for q in answer["queues"]} == {"research", "prod"}
    for queue in answer["queues"]:
        row = page.locator(f'#queues-table tr[data-queue="{queue["name"]}"][data-resource="gpus"]')
        expect(row.locator(".quota")).to_have_attribute("data-value", _js(queue["quota"]["gpus"]))
        expect(row.locator(".usage")).to_have_attribute("data-value", _js(queue["usage"].get("gpus", "")))
        expect(row.locator(".pending")).to_have_attribute("data-value", str(queue["pending"]))
    assert next(q for q in answer["queues"] if q["name"] == "prod")["pending"] == 1  # prod-huge
    screenshot(page, "queues", tmp_path)


def _js(value: float | str) -> str:
    """A number as JavaScript writes it (``4``, not ``4.0``)."""
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def test_model_view_says_which_model_answers(served: tuple[str, httpx.Client], page: Page, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    url, http = served
    models = http.get("/v1/models").json()
    page.goto(f"{url}/ui/#model")
    expect(page.locator("#model-answering")).to_have_text(models["answering"])
    expect(page.locator("#model-error-note")).to_contain_text("the heuristic answers")
    expect(page.locator("#model-error-table tbody tr")).to_have_count(0)
    screenshot(page, "model-heuristic", tmp_path)


def test_place_view_shows_the_score_breakdown_or_the_reasons_as_the_api(served: tuple[str, httpx.Client],
                                                                       page: Page, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    url, http = served
    page.goto(f"{url}/ui/#place")
    expect(page.locator('#place-policy option[value="liquid"]')).to_have_count(1)

    def decide(job_id: str, gpu: str) -> None:
        page.locator("#place-job-id").fill(job_id)
        page.locator("#place-gpu").fill(gpu)
        page.locator("#place-submit").click()

    decide("ui-try-1", "0.5")  # mutating: the service asks for the key the page does not have yet
    expect(page.locator("#key-dialog")).to_be_visible()
    expect(page.locator("#problem")).to_contain_text("401")
    page.locator("#key-input").fill(API_KEY)
    page.locator("#key-save").click()
    expect(page.locator("#key-button")).to_have_text("API key: set")
    decide("ui-try-1", "0.5")
    expect(page.locator("#decision-verdict")).to_have_text("placed")
    same = {"job_id": "ui-try-1", "dry_run": True, "tasks": [{**task(0.5), "gpu_types": []}]}
    asked = http.post("/v1/place", json=same).json()
    terms = page.locator("#decision-score tr[data-term]")
    expect(terms).to_have_count(len(asked["score"]))
    assert {terms.nth(i).get_attribute("data-term") for i in range(terms.count())} == set(asked["score"])
    assert http.get("/v1/jobs/ui-try-1").status_code == 404  # a dry run stores nothing

    decide("ui-huge-1", "64")
    expect(page.locator("#decision-verdict")).to_have_text("can-never-fit")
    refused = http.post("/v1/place", json={"job_id": "ui-huge-1", "tasks": [task(64)]}).json()
    assert refused["verdict"] == "can-never-fit" and not refused["committed"] and refused["reasons"]
    expect(page.locator("#decision-reasons li")).to_have_text(refused["reasons"])
    expect(page.locator("#decision-history li")).to_have_count(2)
    screenshot(page, "place", tmp_path)


# ---- reads protected, and a model with a recent error ---------------------------------------------------

@pytest.fixture(scope="module")
def protected(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A service in this process under uvicorn, reads protected, model version 4 answering, and 80 jobs
    placed and completed: their durations run later and later past the estimates, their GPU usage close."""
    home = tmp_path_factory.mktemp("protected")
    settings = Settings(home=home, api_keys=API_KEY, protect_reads=True, model_poll_s=0)
    rt = Runtime(settings, MemoryStore(load_cluster("pai")), EstimatorHolder(Registry(), "champion"))
    server = uvicorn.Server(uvicorn.Config(create_app(rt=rt), host="127.0.0.1", port=free_port(),
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the in-process service did not start"
        time.sleep(0.05)
    url = f"http://127.0.0.1:{server.config.port}"
    with httpx.Client(base_url=url, headers=KEY, timeout=60) as http:
        for i in range(80):
            gpu = 1 + i % 2
            placed = http.post("/v1/place", json={"job_id": f"done-{i}", "tasks": [task(gpu)]}).json()
            assert placed["committed"] and placed["estimate"]["model_version"] == "4", placed
            late = math.exp(0.02 * i)  # from on time to five times the estimate
            done = http.post(f"/v1/jobs/done-{i}/complete", json={
                "duration_s": 600.0 * (1 + gpu) * late, "usage": {"gpu": 0.8 * gpu * (1.1 if i % 3 else 0.9)}})
            assert done.status_code == 200, done.text
        for i in range(3):
            assert http.post("/v1/place", json={"job_id": f"running-{i}", "tasks": [task(0.5)]}).json()["committed"]
    yield url
    server.should_exit = True
    thread.join(timeout=60)


def test_with_reads_protected_the_page_asks_for_the_key_then_shows_the_models_drift(protected: str, page: Page,
                                                                                     tmp_path: Path) -> None:
    from playwright.sync_api import expect

    url = protected
    assert httpx.get(f"{url}/v1/cluster/gpus").status_code == 401
    page.goto(f"{url}/ui/#model")
    expect(page.locator("#key-dialog")).to_be_visible()
    expect(page.locator("#problem")).to_contain_text("401")
    expect(page.locator("#model-error-table tbody tr")).to_have_count(0)
    page.locator("#key-input").fill(API_KEY)
    page.locator("#key-save").click()
    expect(page.locator("#key-dialog")).to_be_hidden()

    error = httpx.get(f"{url}/v1/models/error", headers=KEY).json()
    by_target = {t["target"]: t for t in error["targets"]}
    assert error["answering"] == "4" and error["completions"] == 80 and set(by_target) == {"duration", "gpu"}
    assert by_target["duration"]["drifted"] is True and by_target["gpu"]["drifted"] is False
    assert by_target["duration"]["train_male"] == Registry.TRAINED["duration.model.male"]
    assert len(by_target["duration"]["rolling_male"]) == 80 - 50 + 1
    expect(page.locator("#model-answering")).to_have_text("4")
    expect(page.locator("#problem")).to_be_hidden()
    for target, entry in by_target.items():
        row = page.locator(f'#model-error-table tr[data-target="{target}"]')
        expect(row.locator(".jobs")).to_have_text(str(entry["jobs"]))
        expect(row.locator(".recent")).to_have_text(f"{entry['recent_male']:.3f}")
        expect(row.locator(".drifted")).to_have_text("drifted" if entry["drifted"] else "no")
        expect(row.locator("svg.spark polyline")).to_have_count(1)
    screenshot(page, "model", tmp_path)

    # the key stays for the tab: the cluster view reads with it too
    page.goto(f"{url}/ui/#cluster")
    expect(page.locator('#cluster-summary [data-stat="running"]')).to_have_attribute("data-value", "3")
    expect(page.locator(".gpu.partial")).not_to_have_count(0)
