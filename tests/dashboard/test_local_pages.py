"""What labml's hosted app offers and a local dashboard cannot is gone from the pages, what works
locally stays (and is shown to work), and the pages show the truth, in a real browser against a
real dashboard and real labml runs: the menu, the settings page, the run page's buttons, the config
rows' eye and star, a short run's chart, and the live-hyperparameter input after Apply."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from browser import CHROMIUM, Chromium
from dashboard_support import Dashboard, ProbeRun

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian chromium (apt-get install chromium)")]
PAGE_LIMIT_S = 60.0
SHORT_RUN = Path(__file__).with_name("short_run.py")
# Elements (hidden or not) whose own text is exactly this.
WITH_TEXT = "(t => [...document.querySelectorAll('body *')].filter(el => el.textContent.trim() === t" \
            " && ![...el.children].some(c => c.textContent.trim() === t)).length)"


def test_the_menu_and_settings_offer_only_what_works_locally(
        dashboard: Dashboard, finished_run: str, no_leftover_processes: None, chromium: Chromium) -> None:
    with chromium.tab(height=700) as browser:
        browser.load(f"{dashboard.url}/runs")
        assert browser.wait_until("document.body.innerText.includes('probe')", PAGE_LIMIT_S)
        browser.evaluate("document.querySelector('.nav-link, .burger, nav button, .fa-bars, .fas').click()")
        assert browser.wait_until("document.body.innerText.includes('Archived Runs')", PAGE_LIMIT_S)
        entries = {name: browser.evaluate(f"{WITH_TEXT}({name!r})")
                   for name in ("Runs", "Archived Runs", "All Runs", "Computers", "Documentation", "Settings", "Sign out")}
        labml_links = browser.evaluate("[...document.querySelectorAll('a')].filter(a => a.href.includes('labml.ai')).length")
        browser.load(f"{dashboard.url}/settings")
        told = browser.wait_until("document.body.innerText.includes('No settings here')", PAGE_LIMIT_S)
        settings = browser.evaluate("document.body.innerText")
    # Removed from the page, not hidden: nothing of them is left in the DOM.
    assert {name: entries[name] > 0 for name in entries} == {
        "Runs": True, "Archived Runs": True, "All Runs": True,
        "Computers": False, "Documentation": False, "Settings": False, "Sign out": False}
    assert labml_links == 0
    assert told and "python -m experiments.dashboard --help" in settings, settings
    assert not {"TOKEN", "Token", "EMAIL", "Email", "Theme", "THEME", "Dark"} & set(settings.split())


def test_the_run_page_has_no_share_button_and_the_config_toggles_work(
        dashboard: Dashboard, finished_run: str, no_leftover_processes: None, chromium: Chromium) -> None:
    with chromium.tab() as browser:
        browser.load(f"{dashboard.url}/run/{finished_run}")
        assert browser.wait_until("document.querySelector('.labml-card svg path') !== null"
                                  " && document.body.innerText.includes('learning_rate')", PAGE_LIMIT_S)  # the card drawn
        buttons = browser.evaluate("[document.querySelectorAll('.fa-share-alt').length,"
                                   " document.querySelectorAll('.toast-custom-container').length,"
                                   " document.querySelectorAll('.run.page .fa-plus').length]")
        card_before = browser.evaluate("document.body.innerText.includes('gamma')")
        # The configs page: gamma (not live, not set) gets the eye and the star, then Save.
        browser.load(f"{dashboard.url}/run/{finished_run}/configs")
        assert browser.wait_until("document.querySelectorAll('.info_list.config .fa-star').length > 0", PAGE_LIMIT_S)
        toggles = browser.evaluate("[document.querySelectorAll('.info_list.config').length,"
                                   " document.querySelectorAll('.info_list.config .fa-eye').length,"
                                   " document.querySelectorAll('.info_list.config .fa-star').length]")
        browser.evaluate("(row => row.querySelector('.fa-star').closest('span.toggle-button').click())"
                         "([...document.querySelectorAll('.info_list.config')].find(r => r.textContent.includes('gamma')))")
        browser.evaluate("document.querySelector('.fa-save').closest('.nav-link').click()")
        assert saved(dashboard, finished_run, "gamma")
        browser.load(f"{dashboard.url}/run/{finished_run}")
        on_card = browser.wait_until("document.body.innerText.includes('gamma')", PAGE_LIMIT_S)
        browser.load(f"{dashboard.url}/runs")
        in_list = browser.wait_until("document.body.innerText.includes('Configs:')"
                                     " && document.body.innerText.includes('gamma')", PAGE_LIMIT_S)
    assert buttons == [0, 0, 1]  # no share button nor its toast; + (a chart of chosen series) stays
    rows, eyes, stars = toggles
    assert rows > 0 and eyes == rows and stars == rows
    # The star selects too: the option is on the run page's card and in the runs list.
    assert not card_before and on_card and in_list


def saved(dashboard: Dashboard, run_uuid: str, key: str) -> bool:
    """Whether the dashboard stores `key` as one of the run's favourite configs, within PAGE_LIMIT_S."""
    deadline = time.monotonic() + PAGE_LIMIT_S
    while time.monotonic() < deadline:
        if key in dashboard.request("GET", f"/api/v1/run/{run_uuid}")[1].get("favourite_configs", []):
            return True
        time.sleep(0.2)
    return False


def test_a_short_run_s_chart_draws_its_first_score_inside_the_axes(
        dashboard: Dashboard, tmp_path: Path, no_leftover_processes: None, chromium: Chromium) -> None:
    # 0.0 first, then 31 scores from 2.0 to 2.3: labml-app's chart left the 0.0 out of its y axis.
    run = ProbeRun(tmp_path / "short", f"{dashboard.url}/api/v1/default", script=SHORT_RUN)
    run_uuid = run.run_uuid()
    assert run.wait() == 0 and "FINISHED" in run.output, run.output
    with chromium.tab() as browser:
        browser.load(f"{dashboard.url}/run/{run_uuid}")
        assert browser.wait_until("document.querySelector('.labml-card path.smoothed-line') !== null", PAGE_LIMIT_S)
        line, axis = browser.evaluate(
            "[document.querySelector('.labml-card path.smoothed-line').getBoundingClientRect().bottom,"
            " document.querySelector('.labml-card g.bottom-axis').getBoundingClientRect().top]")
        lowest_tick = browser.evaluate("document.querySelector('.labml-card g.right-axis g.tick text').textContent")
    assert line <= axis, f"the line reaches {line} px, below the x axis at {axis} px"
    assert lowest_tick == "0"


def test_after_apply_the_input_shows_the_new_value_while_it_is_pending(
        dashboard: Dashboard, tmp_path: Path, no_leftover_processes: None, chromium: Chromium) -> None:
    run = ProbeRun(tmp_path / "live", f"{dashboard.url}/api/v1/default", "100000", "--until", "learning_rate=0.005")
    try:
        run_uuid = run.run_uuid()
        with chromium.tab(height=700) as browser:
            browser.load(f"{dashboard.url}/hyperparams/{run_uuid}")
            # Drawn once the run has reported the values it trains with (before that, the applied
            # column shows its starting value, marked "(start)"; on a busy machine the page can come first).
            assert browser.wait_until("document.querySelectorAll('#params input').length === 5"
                                      " && !document.getElementById('apply').disabled && [...document.querySelector("
                                      "'#params input[name=learning_rate]').closest('tr').cells][3].textContent === '0.00025'",
                                      PAGE_LIMIT_S)
            # Paused, the run asks for nothing: the change stays pending (or sent, had a request of
            # the run's been in flight), and the run keeps training with the old value.
            os.kill(run.proc.pid, signal.SIGSTOP)
            browser.evaluate("document.querySelector('#params input[name=learning_rate]').value = '0.005';"
                             " document.getElementById('apply').click()")
            # The page drawn again with the change: sent or pending in the learning rate's row.
            assert browser.wait_until(
                "document.getElementById('message').textContent.startsWith('Queued') && [...document.querySelector("
                "'#params input[name=learning_rate]').closest('tr').cells].slice(4, 6).some(c => c.textContent === '0.005')",
                PAGE_LIMIT_S)
            shown = browser.evaluate("(i => [i.value, i.placeholder])(document.querySelector('#params input[name=learning_rate]'))")
            # The confirmation in words, not the JSON it was sent as (issue 71).
            message = browser.evaluate("document.getElementById('message').textContent")
            row = browser.evaluate("[...document.querySelector('#params input[name=learning_rate]').closest('tr').cells]"
                                   ".map(c => c.textContent)")
        os.kill(run.proc.pid, signal.SIGCONT)
        run.wait_for_line(lambda line: line == "SAW learning_rate=0.005")
        assert run.wait() == 0, run.output
    finally:
        run.kill()
    assert shown == ["", "0.005"]  # the new value, not the run's 0.00025
    assert message == "Queued learning_rate = 0.005; the run picks it up with its next update.", message
    assert row[3] == "0.00025" and "0.005" in row[4:6]  # applied: the old one; sent or pending: the new one
