"""Headless Chromium driven by Selenium, for the browser tests and the screenshots.

Debian's `chromium` and `chromium-driver` (the Makefile's `test` target installs them);
nothing is downloaded: Selenium is given both paths, so its driver manager never runs.
"""

from __future__ import annotations

import shutil
import tempfile

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage")


def unavailable() -> str:
    """Why no browser can run here, or "" when one can."""
    missing = [name for name in ("chromium", "chromedriver") if shutil.which(name) is None]
    return f"{' and '.join(missing)} not installed (apt-get install chromium chromium-driver)" if missing else ""


def start_browser(width: int = 1280, height: int = 900):
    """A fresh headless Chromium with a profile of its own; `quit()` it when done."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tempfile.mkdtemp(prefix='sundial-chromium-')}")
    options.add_argument(f"--window-size={width},{height}")
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    driver.set_page_load_timeout(20)
    return driver
