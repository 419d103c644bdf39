"""The web UI in a real browser (issue 16): Debian's Chromium, driven through Debian's chromedriver
with Selenium. Run by tests/web_ui.rs, which starts the local cluster and the jobs and passes what
the pages must show; this script only looks and clicks as a user would, and exits non-zero naming
what it did not see.

    python3 tests/web_ui.py SPEC.json

SPEC: {"url", "finished_job", "running_job", "vertices": [ids], "edges": [[from, to]],
       "subtasks": n, "taskmanagers": n, "screenshots": dir}
"""

import json
import os
import sys
import time

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

TIMEOUT = 60


def fail(message):
    print("web UI check failed: " + message, file=sys.stderr)
    sys.exit(1)


def wait(driver, what, probe, timeout=TIMEOUT):
    """Polls probe() until it returns something truthy; the page refreshes itself every second,
    so elements are re-read on every try."""
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        try:
            value = probe()
            if value:
                return value
        except (StaleElementReferenceException, WebDriverException) as e:
            last = e
        time.sleep(0.2)
    shot = os.path.join(SPEC["screenshots"], "failure.png")
    driver.save_screenshot(shot)
    fail(f"timed out waiting for {what} (last error: {last}; page saved to {shot})")


def click(driver, what, selector):
    """Clicks the element once it is there; the page may redraw it between finding and clicking,
    so a stale element is looked up again."""
    def attempt():
        driver.find_element(By.CSS_SELECTOR, selector).click()
        return True
    wait(driver, what, attempt)


def attrs(driver, selector, *names):
    return [
        tuple(e.get_attribute(n) for n in names)
        for e in driver.find_elements(By.CSS_SELECTOR, selector)
    ]


def open_page(driver, fragment):
    driver.get(SPEC["url"] + "#" + fragment)


def check_overview(driver):
    open_page(driver, "/overview")
    ids = {SPEC["finished_job"], SPEC["running_job"]}
    wait(driver, "both jobs in the job list",
         lambda: ids <= {a for (a,) in attrs(driver, "tr.job-row", "data-job-id")})
    tms = driver.find_element(By.CSS_SELECTOR, "#card-taskmanagers .value").text
    if tms != str(SPEC["taskmanagers"]):
        fail(f"the overview shows {tms} TaskManagers, expected {SPEC['taskmanagers']}")


def check_finished_job(driver):
    job = SPEC["finished_job"]
    # From the job list, as a user gets there.
    click(driver, "the finished job in the list", f'tr.job-row[data-job-id="{job}"] a')
    wait(driver, "the finished job's graph", lambda: driver.find_elements(By.CSS_SELECTOR, "#job-graph g.vertex"))
    vertices = {v for (v,) in attrs(driver, "#job-graph g.vertex", "data-vertex-id")}
    if vertices != set(SPEC["vertices"]):
        fail(f"the graph shows vertices {sorted(vertices)}, the job has {sorted(SPEC['vertices'])}")
    edges = {(a, b) for (a, b) in attrs(driver, "#job-graph path.edge", "data-from", "data-to")}
    expected = {tuple(e) for e in SPEC["edges"]}
    if edges != expected:
        fail(f"the graph shows edges {sorted(edges)}, the job has {sorted(expected)}")
    wait(driver, "every vertex FINISHED in the graph",
         lambda: all(s == "FINISHED" for (s,) in attrs(driver, "#job-graph g.vertex", "data-state")))
    # Regions and slot sharing, on demand.
    click(driver, "the regions toggle", 'input[data-toggle="showRegions"]')
    wait(driver, "the pipelined regions", lambda: driver.find_elements(By.CSS_SELECTOR, "#regions tbody tr"))
    click(driver, "the slot sharing toggle", 'input[data-toggle="showSlotSharing"]')
    wait(driver, "the slot sharing groups", lambda: driver.find_elements(By.CSS_SELECTOR, "g.slot-sharing-group"))
    driver.save_screenshot(os.path.join(SPEC["screenshots"], "finished-job-graph.png"))
    click(driver, "the subtasks tab", 'a[data-tab="subtasks"]')
    rows = wait(driver, "the subtasks", lambda: attrs(driver, "tr.subtask", "data-vertex-id", "data-status"))
    if len(rows) != SPEC["subtasks"]:
        fail(f"{len(rows)} subtasks listed, the job has {SPEC['subtasks']}")
    not_finished = [r for r in rows if r[1] != "FINISHED"]
    if not_finished:
        fail(f"subtasks not FINISHED: {not_finished}")


def check_running_job(driver):
    job = SPEC["running_job"]
    open_page(driver, f"/job/{job}")
    wait(driver, "the running job RUNNING",
         lambda: driver.find_element(By.ID, "job-state").get_attribute("data-state") == "RUNNING")
    # Live figures: some vertex shows a rate once the job has run a few seconds.
    wait(driver, "records per second in the graph",
         lambda: any("/s" in t.text and "in –" not in t.text
                     for t in driver.find_elements(By.CSS_SELECTOR, "#job-graph g.vertex text")))
    click(driver, "the checkpoints tab", 'a[data-tab="checkpoints"]')
    completed = wait(driver, "a completed checkpoint in the history",
                     lambda: [c for (c, s) in attrs(driver, "tr.checkpoint", "data-checkpoint", "data-status")
                              if s == "COMPLETED"])
    click(driver, "a completed checkpoint", f'tr.checkpoint[data-checkpoint="{completed[0]}"]')
    wait(driver, "the checkpoint's vertices",
         lambda: len(driver.find_elements(By.CSS_SELECTOR, "#checkpoint-details tbody tr")) == len(SPEC["running_vertices"]))
    driver.save_screenshot(os.path.join(SPEC["screenshots"], "running-job-checkpoints.png"))
    # A savepoint from the UI, into the job storage's savepoints/.
    click(driver, "the savepoint button", "#savepoint-button")
    wait(driver, "the savepoint written",
         lambda: "Savepoint written" in driver.find_element(By.ID, "action-message").text)
    # Cancel: the button asks first.
    click(driver, "the cancel button", "#cancel-button")
    click(driver, "the cancel confirmation", "#cancel-confirm")
    wait(driver, "the job CANCELED",
         lambda: driver.find_element(By.ID, "job-state").get_attribute("data-state") == "CANCELED")
    driver.save_screenshot(os.path.join(SPEC["screenshots"], "running-job-canceled.png"))


def main():
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1600,1000",
                "--disable-gpu", "--no-first-run"]:
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    try:
        check_overview(driver)
        check_finished_job(driver)
        check_running_job(driver)
        errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        if errors:
            fail("console errors: " + json.dumps(errors, indent=1))
    finally:
        driver.quit()
    print("web UI: every check passed")


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        SPEC = json.load(f)
    os.makedirs(SPEC["screenshots"], exist_ok=True)
    main()
