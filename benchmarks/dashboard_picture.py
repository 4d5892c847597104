"""A stopped trial's page in optuna-dashboard, in a real headless Chromium: the README's picture.

    hpo run studies/quickstart.yaml --output runs/quickstart
    .venv/bin/python benchmarks/dashboard_picture.py sqlite:///runs/quickstart/study.db \
        docs/dashboard.png

Serves the storage with optuna-dashboard on a free loopback port, opens the page of the study's
first pruned trial (or ``--trial N``) and saves the screenshot once the page shows the trial's
``collapse_reason``. Needs ``optuna-dashboard``, ``selenium`` and Debian's ``chromium`` and
``chromium-driver``. :func:`screenshot` is what the dashboard test runs.
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

CHROMIUM, DRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def screenshot(storage: str, trial_number: int, out: Path, study_id: int = 1,
               size: str = "1400,1000") -> str:
    """Save the dashboard's page of trial ``trial_number`` (of the ``study_id``-th study in
    ``storage``) to ``out``; return the page's text."""
    from selenium import webdriver

    port = _free_port()
    server = subprocess.Popen(
        [str(Path(sys.executable).with_name("optuna-dashboard")), storage, "--host",
         "127.0.0.1", "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
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
                    "--disable-dev-shm-usage", f"--window-size={size}"):
            options.add_argument(arg)
        browser = webdriver.Chrome(service=webdriver.ChromeService(str(DRIVER)),
                                   options=options)
        try:
            browser.get(f"http://127.0.0.1:{port}/dashboard/studies/{study_id}/trials"
                        f"?numbers={trial_number}")
            text = ""
            for _ in range(50):  # the page renders from the API after it loads
                text = browser.find_element("tag name", "body").text
                if "collapse_reason" in text:
                    break
                time.sleep(0.2)
            browser.save_screenshot(str(out))
        finally:
            browser.quit()
    finally:
        server.terminate()
        server.wait(timeout=30)
    return text


def main() -> None:
    import optuna
    from optuna.trial import TrialState

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("storage", help="the study's storage URL (sqlite:///runs/.../study.db)")
    ap.add_argument("out", type=Path, help="the PNG to write")
    ap.add_argument("--trial", type=int, default=None, help="a trial number (default: the "
                    "first pruned one)")
    ap.add_argument("--size", default="1900,1000", help="the window, W,H pixels")
    args = ap.parse_args()
    summary = optuna.get_all_study_summaries(args.storage)[0]  # a study run makes one
    study = optuna.load_study(study_name=summary.study_name, storage=args.storage)
    number = args.trial
    if number is None:
        pruned = [t.number for t in study.trials if t.state == TrialState.PRUNED]
        if not pruned:
            sys.exit(f"{args.storage}: no pruned trial")
        number = pruned[0]
    text = screenshot(args.storage, number, args.out, study_id=summary._study_id,
                      size=args.size)
    print(f"wrote {args.out}: trial {number}" + ("" if "collapse_reason" in text
                                                 else " (the page showed no collapse_reason)"))


if __name__ == "__main__":
    main()
