"""The HIT pages as workers meet them, in headless Chromium at a desktop (1280x800) and a phone (390x844) screen:
the guidelines open by themselves on the first visit only (remembered per guide version); after that the task
(sentences, condition, answer controls, Submit) lies inside the first screen; every page can be completed with
the keyboard alone, each focused control visibly outlined; and axe-core (axe-playwright-python) finds no serious
or critical accessibility violation, the guide open or closed.

The qualification test is one long page by design (8 items): on it the first screen holds the time and scoring
line and the first item's sentences and fields; its Submit is checked by the keyboard walk instead."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.annotate.test_pages import Hit, export_all

pytestmark = pytest.mark.slow
SCREENS = {"desktop": (1280, 800), "phone": (390, 844)}
# what must be inside the first screen once the guide has been seen: every element each selector matches
FIRST_SCREEN = {
    "conditions": ["[data-sentence]", "#condition_high", "#condition_low", "#hit-submit"],
    "ratings": [".sentence", ".condition", ".flag", ".scale label", "#hit-submit"],
    "bws": [".card .line", ".picks label", "#hit-submit"],
    "qualification": ["#scoring", "section.item >> nth=0 >> .sentence", "#condition_high_1", "#condition_low_1"],
}
SERIOUS = {"serious", "critical"}


@pytest.fixture(scope="module")
def tasks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return export_all(tmp_path_factory.mktemp("layout") / "annotate")


def close_open_guides(hit: Hit) -> int:
    """Close every guide that opens by itself (the qualification page opens its second after the first)."""
    closed = 0
    while hit.page.locator("dialog.guide[open]").count():
        hit.page.locator("dialog.guide[open] [data-guide-close]").click()
        closed += 1
        assert closed < 5, "a guide keeps opening"
        # a dialog's close event fires as a later task, and the next guide opens from it: let it run
        hit.page.wait_for_timeout(250)
    return closed


def outside_first_screen(hit: Hit, selectors: list[str], size: tuple[int, int], scrolled: bool = False) -> list[str]:
    """The matched elements (by selector and index) not wholly inside the first screen, unscrolled (or the screen
    as it is now, `scrolled`)."""
    assert scrolled or hit.page.evaluate("window.scrollY") == 0
    width, height = size
    outside = []
    for selector in selectors:
        found = hit.page.locator(selector)
        assert found.count(), f"nothing matches {selector}"
        for n in range(found.count()):
            box = found.nth(n).bounding_box()
            if box is None or box["x"] < 0 or box["y"] < 0 or box["x"] + box["width"] > width + 0.5:
                outside.append(f"{selector}[{n}] {box}")
            elif box["y"] + box["height"] > height + 0.5:
                outside.append(f"{selector}[{n}] ends at {box['y'] + box['height']:.0f} px of {height}")
    return outside


@pytest.mark.parametrize("screen", sorted(SCREENS))
@pytest.mark.parametrize("stage", sorted(FIRST_SCREEN))
def test_the_guide_opens_once_then_the_task_is_in_the_first_screen(browser, tasks: Path, stage: str, screen: str):
    size = SCREENS[screen]
    hit = Hit(browser, tasks, stage, guide_seen=False, viewport=size)
    assert hit.page.locator("dialog.guide[open]").is_visible()  # a first visit: the guide comes first
    assert close_open_guides(hit) == (2 if stage == "qualification" else 1)
    hit.page.goto(hit.page.url)  # the next HIT: seen once, the task comes first
    assert outside_first_screen(hit, FIRST_SCREEN[stage], size) == []
    assert hit.page.locator("dialog.guide[open]").count() == 0
    hit.page.locator(".guide-open").first.click()  # and the guide is one click away, Escape closes it
    assert hit.page.locator("dialog.guide[open]").is_visible()
    hit.page.keyboard.press("Escape")
    assert hit.page.locator("dialog.guide[open]").count() == 0
    hit.close()


def test_a_changed_guide_opens_again(browser, tasks: Path):
    hit = Hit(browser, tasks, "conditions", guide_seen=False)
    close_open_guides(hit)
    version = hit.page.get_attribute("#hit", "data-guide-version")
    key = f"csts-guide:guide-conditions:{version}"
    assert hit.page.evaluate(f"localStorage.getItem('{key}')") == "1"
    hit.page.evaluate(f"localStorage.removeItem('{key}'); localStorage.setItem('csts-guide:guide-conditions:0ld', '1')")
    hit.page.goto(hit.page.url)  # only an older version seen: this one opens
    assert hit.page.locator("dialog.guide[open]").is_visible()
    hit.close()


def test_a_refused_best_worst_answer_is_said_by_the_picks_in_view_on_a_phone(browser, tasks: Path):
    hit = Hit(browser, tasks, "bws", viewport=SCREENS["phone"])
    hit.page.keyboard.press("3")  # the third pair as both the most and the least similar
    hit.page.keyboard.press("e")
    hit.submit()
    error = hit.page.locator("[data-error=best]")
    assert error.inner_text() == "The most and the least similar must be different pairs."
    assert outside_first_screen(hit, ["[data-error=best]"], SCREENS["phone"], scrolled=True) == []
    focused = hit.page.evaluate("[document.activeElement.name, document.activeElement.value]")
    assert focused == ["worst", "3"]  # the pick to change has the focus
    hit.close()


# what the keyboard walk types into each text field, by the field's name without its number
TYPED = {"condition_high": "The place.", "condition_low": "The time of day."}
FOCUSED = """() => {
  const el = document.activeElement;
  const shown = (el.type === "radio" || el.type === "checkbox") && el.closest("label") ? el.closest("label") : el;
  const style = getComputedStyle(shown);
  return {tag: el.tagName, type: el.type || "", name: el.name || "", id: el.id, value: el.value || "",
          checked: !!el.checked, outlined: style.outlineStyle !== "none" && parseFloat(style.outlineWidth) >= 2};
}"""


def walk_by_keyboard(hit: Hit) -> dict[str, str]:
    """Complete the page with Tab, typing, Space, arrows and Enter only; every focused control must be outlined.
    Text fields get TYPED (Enter in the first condition field must move to the second), radio groups their first
    choice (the least similar then moves one on with an arrow, as it must differ from the most similar)."""
    for _ in range(120):
        hit.page.keyboard.press("Tab")
        focused = hit.page.evaluate(FOCUSED)
        assert focused["outlined"], f"focus not visible on {focused}"
        base = focused["name"].rstrip("_0123456789")
        if focused["type"] == "text" and not focused["value"]:
            hit.page.keyboard.type(TYPED[base])
            if base == "condition_high":
                hit.page.keyboard.press("Enter")  # moves on, does not submit
                after = hit.page.evaluate(FOCUSED)
                assert after["name"] == focused["name"].replace("high", "low"), after
                hit.page.keyboard.type(TYPED["condition_low"])
        elif focused["type"] == "radio" and not focused["checked"]:
            hit.page.keyboard.press("Space")
            if base == "worst":
                hit.page.keyboard.press("ArrowRight")
        elif focused["id"] == "hit-submit":
            with hit.page.expect_response("**/mturk/externalSubmit"):
                hit.page.keyboard.press("Enter")
            return hit.posted[0]
    raise AssertionError("the keyboard walk never reached Submit")


@pytest.mark.parametrize("stage", sorted(FIRST_SCREEN))
def test_every_page_can_be_completed_by_keyboard_alone(browser, tasks: Path, stage: str):
    hit = Hit(browser, tasks, stage)
    posted = walk_by_keyboard(hit)
    hit.close()
    if stage == "conditions":
        assert (posted["condition_high"], posted["condition_low"]) == (TYPED["condition_high"], TYPED["condition_low"])
    elif stage == "ratings":
        assert posted["rating"] == "1" and "not_pertinent" not in posted
    elif stage == "bws":
        assert (posted["best"], posted["worst"]) == ("1", "2")
    else:
        assert posted["condition_low_2"] == TYPED["condition_low"] and posted["rating_6"] == "1"


def serious_violations(page) -> list[str]:
    from axe_playwright_python.sync_playwright import Axe

    found = Axe().run(page).response["violations"]
    return [f"{v['id']} ({v['impact']}): {[n['target'] for n in v['nodes']][:3]}" for v in found
            if v["impact"] in SERIOUS]  # fmt: skip


@pytest.mark.parametrize("stage", sorted(FIRST_SCREEN))
def test_axe_finds_no_serious_violation(browser, tasks: Path, stage: str):
    first = Hit(browser, tasks, stage, guide_seen=False)  # the guide open over the task
    assert serious_violations(first.page) == []
    first.close()
    for size in SCREENS.values():
        hit = Hit(browser, tasks, stage, viewport=size)
        hit.submit()  # and with the checks' messages shown
        assert serious_violations(hit.page) == [], size
        hit.close()
