"""The README stays a guide and the results page stays a set of reproducible tables.

Both grew back into a lab notebook once; these checks keep them to the shape a newcomer
relies on: the README's first lines are the two setup commands and it reads in one sitting,
and every table of docs/results.md names the bench command that prints it.
"""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MAX_README_LINES = 250
MAX_RESULTS_LINES = 400


def test_the_readme_opens_with_the_two_setup_commands_and_stays_short():
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines"
    first_block = lines[lines.index("```bash") + 1:lines.index("```", lines.index("```bash"))]
    assert [line.split("#")[0].strip() for line in first_block] == ["make demo", "make test"]
    assert lines.index("```bash") < 5  # before anything else


def tables_without_a_command(text: str) -> list[str]:
    """The first row of each Markdown table in ``text`` with no ``python bench/`` command
    between the heading it stands under and itself (one report may print several tables)."""
    missing, command_seen, previous = [], False, ""
    for line in text.splitlines():
        if line.startswith("#"):
            command_seen = False
        command_seen |= bool(re.search(r"python bench/\w+\.py", line))
        if line.startswith("|") and not previous.startswith("|") and not command_seen:
            missing.append(line)
        previous = line
    return missing


def test_every_results_table_names_the_command_that_prints_it():
    text = (REPO / "docs" / "results.md").read_text()
    assert len(text.splitlines()) <= MAX_RESULTS_LINES
    assert tables_without_a_command(text) == []
    # the check itself tells a table without its command
    assert tables_without_a_command("## A\n\n| a |\n|---|\n") == ["| a |"]
    assert tables_without_a_command("`python bench/x.py report`\n\n| a |\n\n## B\n| b |\n") \
        == ["| b |"]
