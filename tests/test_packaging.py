"""wfkit as a user installs it: built into a wheel and an sdist, each installed into a fresh
virtual environment, and run from a folder outside the checkout.

The editable install of ``make demo`` reads every file from the checkout, so a file that the
package reads at run time but does not ship (SQL, migrations, JavaScript, CSS) passes every
other test. Here the README's first example, ``wfkit demo``, a PostgreSQL run and the widgets
run from the installed package alone, and the wheel is checked to hold exactly the package.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tarfile
import textwrap
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.postgres import postgres_database

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "wfkit"
VERSION = importlib.metadata.version("wfkit")
COPY_IGNORED = shutil.ignore_patterns(
    ".git",
    ".venv",
    "__pycache__",
    "*.pyc",
    "*.egg-info",
    "build",
    "dist",
    ".*_cache",
    ".hypothesis",
    "*.duckdb",
    "*.duckdb.wal",
    "*.duckdb.commits",
    "wfkit-demo",
)
SHIPPED_SUFFIXES = {".py", ".sql", ".js", ".css", ".typed"}
UV = str(Path(sys.executable).with_name("uv"))  # the dev extra installs it beside python
# one worker builds once and installs once: the module's fixtures are not shared across workers
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("packaging")]


def _source_files() -> set[str]:
    """Every file of the package in the checkout, as ``wfkit/...`` paths."""
    return {
        path.relative_to(ROOT).as_posix()
        for path in PACKAGE.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    }


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist and the wheel built from (a copy of) the checkout; the wheel from the sdist."""
    work = tmp_path_factory.mktemp("build")
    source = work / "source"
    shutil.copytree(ROOT, source, ignore=COPY_IGNORED)
    out = work / "dist"
    subprocess.run(
        [sys.executable, "-m", "build", "--installer", "uv", "--outdir", str(out), str(source)],
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
        env=_user_env(),
    )
    return out


def _one(folder: Path, pattern: str) -> Path:
    found = sorted(folder.glob(pattern))
    assert len(found) == 1, f"expected one {pattern} in {folder}, found {found}"
    return found[0]


def test_the_wheel_holds_the_package_and_nothing_else(dist: Path) -> None:
    wheel = _one(dist, f"wfkit-{VERSION}-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    info = f"wfkit-{VERSION}.dist-info/"
    stray = [n for n in names if not n.startswith(("wfkit/", info))]
    assert stray == [], f"the wheel holds files outside the package: {stray}"
    package = {n for n in names if n.startswith("wfkit/")}
    missing = sorted(_source_files() - package)
    assert missing == [], (
        f"files of wfkit/ the wheel does not ship (pyproject package-data): {missing}"
    )
    odd = sorted(n for n in package if Path(n).suffix not in SHIPPED_SUFFIXES)
    assert odd == [], f"files the package never reads are in the wheel: {odd}"
    assert {n for n in package if "/tests/" in n or "notebook" in n.lower()} == set()
    entry_points = zipfile.ZipFile(wheel).read(info + "entry_points.txt").decode()
    assert "wfkit = wfkit.cli:main" in entry_points


def test_the_sdist_holds_the_package_its_docs_and_no_local_state(dist: Path) -> None:
    sdist = _one(dist, f"wfkit-{VERSION}.tar.gz")
    top = f"wfkit-{VERSION}/"
    names = {m.name.removeprefix(top) for m in tarfile.open(sdist).getmembers() if m.isfile()}
    missing = sorted(_source_files() - names)
    assert missing == [], f"files of wfkit/ the sdist does not ship: {missing}"
    assert {"pyproject.toml", "README.md"} <= names
    local = sorted(n for n in names if re.search(r"(^|/)(\.venv|\.git|__pycache__)/|\.duckdb", n))
    assert local == [], f"the sdist holds local state: {local}"


USER_SCRIPT = """\
import importlib.metadata, os, subprocess, sys
from pathlib import Path

import wfkit as wf

here = Path.cwd()
assert Path(wf.__file__).resolve().is_relative_to(Path(sys.prefix).resolve()), wf.__file__
assert wf.__version__ == importlib.metadata.version("wfkit")

{readme}

assert run.status == "completed", run.explain()
assert run.data.is_approved is True
engine.close()
assert (here / "runs.duckdb").is_file()

# PostgreSQL: start, run, signal (the README's engine with a postgresql:// URL)
with wf.Engine(os.environ["PACKAGING_POSTGRES"]) as pg:
    pg.register(flow)
    pg_run = pg.start("onboarding", {{"customer_id": "p-1", "email": "p@b.c",
                                      "needs_approval": True}})
    pg.run_until_idle()
    assert pg_run.status == "waiting", pg_run.explain()
    assert pg.signal("approval", "p-1", {{"approved": False}}) is True
    pg.run_until_idle()
    assert pg_run.status == "completed", pg_run.explain()
    assert pg_run.data.is_approved is False

# the widgets: their JavaScript and CSS ship with the package
import wfkit.widgets as widgets

editor = widgets.Editor(flow)
assert "export" in editor.surface._esm and "wfkit" in editor.surface._css
assert "<svg" in flow.to_svg()
print("USER SCRIPT OK")
"""


def _readme_example() -> str:
    """The README's first example: the code of "A workflow in code", then of "Running
    workflows durably" (the first block of each section)."""
    text = (ROOT / "README.md").read_text()
    blocks = []
    for heading in ("## A workflow in code", "## Running workflows durably"):
        section = text.split(heading + "\n", 1)[1]
        blocks.append(re.search(r"```python\n(.*?)```", section, re.S).group(1))  # type: ignore[union-attr]
    return "\n".join(blocks)


@pytest.fixture(scope="module", params=["wheel", "sdist"])
def installed(
    request: pytest.FixtureRequest, dist: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    """A fresh venv with ``wfkit[notebook,postgres]`` installed from the wheel or the sdist.

    uv installs it, resolving the package's declared dependencies as pip does, from its cache
    once warm: seconds instead of the minutes pip takes for the two environments."""
    artifact = _one(dist, "*.whl" if request.param == "wheel" else "*.tar.gz")
    venv = tmp_path_factory.mktemp(f"venv-{request.param}") / "env"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)],
        check=True,
        timeout=120,
        env=_user_env(),
    )
    pip = subprocess.run(
        [
            UV,
            "pip",
            "install",
            "--quiet",
            "--python",
            str(venv / "bin" / "python"),
            f"wfkit[notebook,postgres] @ {artifact.as_uri()}",
        ],
        capture_output=True,
        text=True,
        timeout=900,
        # a user's shell: with PYTHONPATH naming the checkout (as the Dask tests' workers need),
        # pip would find wfkit "already installed" there and install only its dependencies
        env=_user_env(),
    )
    assert pip.returncode == 0, pip.stderr[-3000:]
    yield venv


def _user_env() -> dict[str, str]:
    """The environment of a user's shell: no PYTHONPATH into the checkout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env["COLUMNS"] = "200"
    return env


def test_the_installed_package_runs_the_readme_demo_postgres_and_widgets(
    installed: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "user"
    outside.mkdir()
    script = outside / "example.py"
    readme = _readme_example()
    assert "wf.Engine(" in readme and "engine.signal(" in readme
    script.write_text(USER_SCRIPT.format(readme=textwrap.dedent(readme)))
    python = str(installed / "bin" / "python")
    with postgres_database() as url:
        env = {**_user_env(), "PACKAGING_POSTGRES": url}
        done = subprocess.run(
            [python, str(script)], cwd=outside, env=env, capture_output=True, text=True, timeout=300
        )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert "USER SCRIPT OK" in done.stdout

    wfkit = str(installed / "bin" / "wfkit")
    version = subprocess.run(
        [wfkit, "--version"], cwd=outside, env=_user_env(), capture_output=True, text=True
    )
    metadata = subprocess.run(
        [python, "-c", "import importlib.metadata as m; print(m.version('wfkit'))"],
        cwd=outside,
        env=_user_env(),
        capture_output=True,
        text=True,
    )
    assert version.returncode == 0 and metadata.returncode == 0, version.stderr + metadata.stderr
    assert version.stdout.strip() == f"wfkit {metadata.stdout.strip()}" == f"wfkit {VERSION}"

    demo = subprocess.run(
        [wfkit, "demo"], cwd=outside, env=_user_env(), capture_output=True, text=True, timeout=300
    )
    assert demo.returncode == 0, demo.stdout[-2000:] + demo.stderr[-4000:]
    assert "all 8 runs reached their expected status" in demo.stdout
    assert (outside / "demo.duckdb").is_file()
