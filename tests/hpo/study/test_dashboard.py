"""optuna-dashboard over a study that ``hpo run`` made, in a real headless Chromium: a pruned
trial's prediction, interval and explanation are on its page.

``HPO_DASHBOARD_SCREENSHOT=docs/dashboard.png`` also writes the screenshot there (the README's).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from hpo.cli import main
from tests.hpo._studies import TINY, write_study

CHROMIUM, DRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_dashboard_shows_a_pruned_trials_prediction(tmp_path: Path) -> None:
    if not (CHROMIUM.exists() and DRIVER.exists()):
        pytest.skip("headless browser missing: apt-get install chromium chromium-driver")
    webdriver = pytest.importorskip("selenium.webdriver", reason="pip install selenium")
    pytest.importorskip("optuna_dashboard", reason="pip install optuna-dashboard")
    # the best settings first, so that the worse ones are stopped against it
    search = {"lr": {**TINY["search"]["lr"], "values": [0.02, 0.005]},
              "tau": {**TINY["search"]["tau"], "values": [0.4, 0.1]}}
    path = write_study(tmp_path, "tiny", search=search)
    assert main(["run", str(path), "--quiet", "--no-report"]) == 0
    url = f"sqlite:///{tmp_path / 'out' / 'study.db'}"
    pruned = [t for t in optuna.load_study(study_name="tiny", storage=url).trials
              if t.state == TrialState.PRUNED]
    assert pruned, "the study stopped no trial"
    trial = pruned[0]

    port = _free_port()
    server = subprocess.Popen(
        [str(Path(sys.executable).with_name("optuna-dashboard")), url, "--host", "127.0.0.1",
         "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/api/studies", timeout=1)
                break
            except OSError:
                time.sleep(0.2)
        options = webdriver.ChromeOptions()
        options.binary_location = str(CHROMIUM)
        for arg in ("--headless=new", "--no-sandbox", "--disable-gpu",
                    "--disable-dev-shm-usage", "--window-size=1400,1000"):
            options.add_argument(arg)
        browser = webdriver.Chrome(service=webdriver.ChromeService(str(DRIVER)),
                                   options=options)
        try:
            browser.get(f"http://127.0.0.1:{port}/dashboard/studies/1/trials"
                        f"?numbers={trial.number}")
            text = ""
            for _ in range(50):  # the page renders from the API after it loads
                text = browser.find_element("tag name", "body").text
                if "collapse_reason" in text:
                    break
                time.sleep(0.2)
            shot = tmp_path / "dashboard.png"
            browser.save_screenshot(str(shot))
        finally:
            browser.quit()
    finally:
        server.terminate()
        server.wait(timeout=30)
    # the pruned trial's page: its state, the sentence, the prediction and its interval
    assert f"Trial {trial.number}" in text and "Pruned" in text
    assert f"collapse_reason {trial.user_attrs['collapse_reason']}" in text
    low, high = trial.user_attrs["predicted_final_loss_interval"]
    assert f"predicted_final_loss {trial.user_attrs['predicted_final_loss']}" in text
    assert f"predicted_final_loss_interval [{low}, {high}]" in text
    assert shot.stat().st_size > 20_000
    if os.environ.get("HPO_DASHBOARD_SCREENSHOT"):
        shutil.copy(shot, os.environ["HPO_DASHBOARD_SCREENSHOT"])
