"""The docs' pictures, taken again from the real thing (`scripts/screenshots`): the tours
played on a `tarry dev --tour teams` in a fresh directory, offline, and their pages shot
in headless Chromium. Look at each picture before committing it.

- `inbox.png` (the docs' home): the inbox with the README tour's run open beside the
  list, its conversation and its `write_file` waiting for approval; a chat run waiting
  for its user in the list too;
- `tour-inbox.png`: that run's page in the inbox, its `write_file` waiting;
- `tour-temporal-ui.png`: the tour's run in the Temporal UI once it completed;
- `tour-timeline.png`: that run's timeline in the inbox: its calls, the waits for a reply,
  the approval and the budget;
- `teams-ui-lead.png`, `teams-ui-child.png`: the teams tour's lead (`launch-plan`) and its
  child in the Temporal UI;
- `cli-reference.png`: the docs site's command-line reference (built first, `scripts/docs`).

`python -m tests.screenshots [DIR]` writes them into DIR (`docs/` by default)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from selenium.webdriver.remote.webdriver import WebDriver

from tarry.contracts import Phase
from tests.browser import chromium, static_site
from tests.deadline import deadline
from tests.test_tour import ROOT, readme_tour, run_command, tarry_dev, verb

PATIENCE = deadline(60)
SETTLE = deadline(2)
"""How long a page that shows its marker may still be drawing (fonts, a timeline)."""
LEAD = "launch-plan"


def shoot(browser: WebDriver, url: str, marker: str, out: Path) -> None:
    """`url` once its text holds `marker`, as a PNG at `out`."""
    browser.get(url)
    _until_shown(browser, url, marker)
    _save(browser, out)


def shoot_timeline(browser: WebDriver, url: str, shown: str, marker: str, out: Path) -> None:
    """The run page at `url`, once it shows `shown`, with its timeline opened and scrolled
    into view, once that holds `marker`."""
    browser.get(url)
    _until_shown(browser, url, shown)
    # Opened as a click on its summary does (`toggle`); the page's sticky bar may cover it.
    browser.execute_script("document.getElementById('timeline').open = true")
    _until_shown(browser, url, marker)
    time.sleep(SETTLE)  # the page may still scroll to its newest message
    browser.execute_script(
        "const top = document.getElementById('run').getBoundingClientRect().top;"
        " window.scrollTo(0, top + window.scrollY - 60)"
    )
    browser.save_screenshot(str(out))
    print(f"wrote {out}")


def shoot_from_the_top(browser: WebDriver, url: str, marker: str, out: Path) -> None:
    """`url` once its text holds `marker`, scrolled to its top (a run's page scrolls to
    its newest message as it opens): the list of runs and the run's page side by side."""
    browser.get(url)
    _until_shown(browser, url, marker)
    time.sleep(SETTLE)
    browser.execute_script("window.scrollTo(0, 0)")
    _save(browser, out)


def _until_shown(browser: WebDriver, url: str, marker: str) -> None:
    give_up = time.monotonic() + PATIENCE
    while marker not in browser.find_element("tag name", "body").text:
        if time.monotonic() > give_up:
            raise SystemExit(f"error: {url} never showed {marker!r}")
        time.sleep(0.2)


def _save(browser: WebDriver, out: Path) -> None:
    time.sleep(SETTLE)
    browser.save_screenshot(str(out))
    print(f"wrote {out}")


async def take(out: Path, home: Path) -> None:
    """The pictures of the inbox and the Temporal UI, of tours played in `home`."""
    _, commands = readme_tour()
    bin_dir = Path(sys.executable).parent
    async with tarry_dev(home, bin_dir, "tarry dev --tour teams") as dev:
        ui = f"http://127.0.0.1:{dev.env['TARRY_UI_PORT']}/namespaces/default/workflows"
        approving = [verb(c) for c in commands].index("approve")
        for command in commands[:approving]:
            await run_command(command, dev.env, home)
        run = dev.env["RUN"]
        chat = await run_command('tarry start --mode chat "Plan the launch party"', dev.env, home)
        await dev.tarry.get(chat.strip()).wait_for({Phase.WAITING_USER}, PATIENCE)
        with chromium(1280, 1340) as browser:
            shoot_from_the_top(browser, f"{dev.api}/#/runs/{run}", "Approve", out / "inbox.png")
        with chromium(1280, 860) as browser:
            shoot(browser, f"{dev.api}/#/runs/{run}", "Approve", out / "tour-inbox.png")
        for command in commands[approving:]:
            await run_command(command, dev.env, home)
        await run_command(
            f'tarry start --id {LEAD} --agent researcher "Who writes the Q3 launch blog post?"',
            dev.env,
            home,
        )
        await run_command(f"tarry watch {LEAD}", dev.env, home)
        with chromium(1280, 860) as browser:
            page = f"{dev.api}/#/runs/{run}"
            done = "the checklist is in actions.md"
            shoot_timeline(browser, page, done, "budget · by", out / "tour-timeline.png")
        with chromium(1440, 1100) as browser:
            shoot(browser, f"{ui}/{run}", "Completed", out / "tour-temporal-ui.png")
            shoot(browser, f"{ui}/{LEAD}", "researcher for", out / "teams-ui-lead.png")
            child = f"{ui}/{LEAD}:researcher-1"
            shoot(browser, child, "Parent", out / "teams-ui-child.png")


def main(out: Path) -> None:
    with tempfile.TemporaryDirectory() as directory:
        home = Path(directory)
        asyncio.run(take(out, home))
        site = home / "site"
        subprocess.run([ROOT / "scripts" / "docs", "--site-dir", str(site)], check=True)
        with static_site(site) as url, chromium(1280, 900) as browser:
            shoot(browser, f"{url}/reference/cli/", "tarry start", out / "cli-reference.png")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs")
