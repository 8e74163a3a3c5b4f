"""A JupyterLab 4 server for the browser tests, and what a test reads from a notebook page in it.

:class:`LabServer` starts one fresh JupyterLab per test session, as BROWSER-TESTING.md says:
``port_retries=0`` (a busy port fails instead of silently moving the server), a token,
``expose_app_in_browser`` (so a test reaches ``window.jupyterapp``), the news toast disabled, and
its own config, data, settings, workspace and temporary folders, so neither the user's Jupyter
set-up nor an earlier run leaks in. Its notebook folder is a copy of ``notebooks/`` per theme
under the session's temporary folder: outputs never reach the repository. The ``python3`` kernel
is this interpreter (the venv running the tests), with ``PYTHONPATH`` set to this checkout, so
the kernel imports the wfkit under test.

:class:`LabPage` drives one notebook in one page: open it with ``?reset``, wait for an idle
kernel, switch the theme, Run All (``notebook:run-all-cells`` through
``window.jupyterapp.commands``), wait until every cell has run, then read what the page shows:
error outputs, pictures wider than their output area, widget views, clipped controls.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

if TYPE_CHECKING:
    from playwright.sync_api import Page

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = REPO / "notebooks"
START_TIMEOUT = 90.0
RUN_TIMEOUT = 240.0
"""How long Run All of one notebook may take (notebook 02 kills a child process on purpose)."""
THEMES = {"light": "JupyterLab Light", "dark": "JupyterLab Dark"}
ANNOUNCEMENTS = "@jupyterlab/apputils-extension:announcements"
MIN_CONTRAST = 3.0
"""Least contrast ratio of a widget's text against what is behind it: WCAG 2's minimum for large
text and for user-interface parts (4.5 is its minimum for body text); below it text is hard to
read, and the dark theme's "nearly invisible" text is far below."""


def log_tail(log: Path, lines: int = 40) -> str:
    """The last ``lines`` lines of a server's log (for the message of a server that failed)."""
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


def end_process(process: subprocess.Popen[bytes], timeout: float) -> None:
    """Terminate ``process``; kill it if it has not exited within ``timeout`` seconds."""
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=timeout)


@dataclass
class LabServer:
    """One JupyterLab process serving ``root`` (copies of the notebooks) on 127.0.0.1."""

    home: Path
    port: int
    token: str = field(default_factory=lambda: uuid.uuid4().hex)
    process: subprocess.Popen[bytes] | None = None
    started_in: float = 0.0
    tmp: Path = Path()

    @property
    def root(self) -> Path:
        return self.home / "notebooks"

    @property
    def log(self) -> Path:
        return self.home / "lab.log"

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def prepare(self) -> None:
        """Copy the notebooks (once per theme) and write Lab's and the kernel's settings."""
        for theme in THEMES:
            shutil.copytree(NOTEBOOKS, self.root / theme, ignore=shutil.ignore_patterns("out"))
        labconfig = self.home / "config" / "labconfig"
        labconfig.mkdir(parents=True)
        (labconfig / "page_config.json").write_text(
            json.dumps({"disabledExtensions": {ANNOUNCEMENTS: True}})
        )
        kernel = self.home / "data" / "kernels" / "python3"
        kernel.mkdir(parents=True)
        spec = {
            "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "Python 3 (wfkit tests)",
            "language": "python",
        }
        (kernel / "kernel.json").write_text(json.dumps(spec))
        for name in ("runtime", "workspaces"):
            (self.home / name).mkdir()
        # every cell laid out, on screen or not, so that what is measured is what a reader sees
        # on scrolling there (Lab's default only lays out the cells in view)
        tracker = self.home / "settings" / "@jupyterlab" / "notebook-extension"
        tracker.mkdir(parents=True)
        (tracker / "tracker.jupyterlab-settings").write_text(json.dumps({"windowingMode": "none"}))
        self.tmp = Path(tempfile.mkdtemp(prefix="wfkit-lab-"))  # short, as a user's /tmp/... is

    def environment(self) -> dict[str, str]:
        path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
        return dict(
            os.environ,
            PYTHONPATH=path,
            PYTHONUNBUFFERED="1",
            JUPYTER_CONFIG_DIR=str(self.home / "config"),
            JUPYTER_DATA_DIR=str(self.home / "data"),
            JUPYTER_RUNTIME_DIR=str(self.home / "runtime"),
            JUPYTERLAB_SETTINGS_DIR=str(self.home / "settings"),
            JUPYTERLAB_WORKSPACES_DIR=str(self.home / "workspaces"),
            TMPDIR=str(self.tmp),  # the notebooks' temporary folders land here
        )

    def start(self) -> None:
        """Start Lab and wait until it lists the folder of this session's copies."""
        began = time.monotonic()
        self.prepare()
        command = [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            "--ip=127.0.0.1",
            f"--port={self.port}",
            "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={self.token}",
            "--LabApp.expose_app_in_browser=True",
            "--JupyterNotebookApp.expose_app_in_browser=True",  # Notebook 7, same server
            f"--ServerApp.root_dir={self.root}",
        ]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            command.append("--allow-root")
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, cwd=self.root, env=self.environment()
            )
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"JupyterLab exited with {self.process.returncode}:\n{self.tail()}"
                )
            try:
                if "light" in [item["name"] for item in self.api("contents")["content"]]:
                    break
            except (urllib.error.URLError, ConnectionError, TimeoutError, KeyError, ValueError):
                pass
            if time.monotonic() > began + START_TIMEOUT:
                raise RuntimeError(f"JupyterLab not ready in {START_TIMEOUT:.0f} s:\n{self.tail()}")
            time.sleep(0.2)
        self.started_in = time.monotonic() - began

    def api(self, path: str, method: str = "GET") -> Any:
        request = urllib.request.Request(
            f"{self.base}/api/{path}",
            method=method,
            headers={"Authorization": f"token {self.token}"},
        )
        with urllib.request.urlopen(request, timeout=10) as reply:
            body = reply.read()
        return json.loads(body) if body else None

    def shut_down_kernels(self, path: str) -> None:
        """End the sessions (and kernels) of the notebook at ``path``: free memory, stop threads."""
        for session in self.api("sessions"):
            if session.get("path") == path:
                self.api(f"sessions/{session['id']}", method="DELETE")

    def stop(self) -> None:
        """Stop Lab (it shuts its kernels down) and remove the notebooks' temporary folders."""
        if self.process is not None and self.process.poll() is None:
            end_process(self.process, timeout=20)
        if self.tmp != Path():
            shutil.rmtree(self.tmp, ignore_errors=True)

    def tail(self) -> str:
        return log_tail(self.log)

    def url(self, path: str, interface: str = "lab") -> str:
        """The page of notebook ``path`` in JupyterLab (``lab``) or Notebook 7 (``notebook``),
        which the same server serves (the ``notebook`` package is a server extension)."""
        if interface == "notebook":
            return f"{self.base}/notebooks/{quote(path)}?token={self.token}"
        return f"{self.base}/lab/tree/{quote(path)}?reset&token={self.token}"


# --- what the page is asked (JavaScript run in the page) -------------------------------------

# the notebook: the current widget, else the first notebook in the main area
_CURRENT = """const w = (() => {
  const app = window.jupyterapp;
  if (!app) return null;
  const isNotebook = (x) => !!x && !!x.content && !!x.content.widgets && !!x.sessionContext;
  if (isNotebook(app.shell.currentWidget)) return app.shell.currentWidget;
  for (const x of app.shell.widgets('main')) if (isNotebook(x)) return x;
  return app.shell.currentWidget;  // a side panel (a sidecar) may have taken the focus
})();"""

_READY = (
    "(path) => {"
    + _CURRENT
    + """
  if (!w || !w.context || w.context.path !== path || !w.content || !w.content.widgets) return false;
  const kernel = w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
  return !!kernel && kernel.status === 'idle' && w.content.widgets.length > 0;
}"""
)

_PROGRESS = (
    "() => {"
    + _CURRENT
    + """
  const out = {kernel: w.sessionContext.session.kernel.status, running: 0, unrun: [], errors: []};
  w.content.widgets.forEach((cell, index) => {
    if (cell.model.type !== 'code') return;
    if (cell.model.executionState === 'running') out.running += 1;
    if (cell.model.executionCount === null) out.unrun.push(index);
    for (let i = 0; i < cell.model.outputs.length; i++) {
      const o = cell.model.outputs.get(i).toJSON();
      if (o.output_type === 'error') {
        out.errors.push(`cell ${index}: ${o.ename}: ${o.evalue}`);
      } else if (o.output_type === 'stream' && o.name === 'stderr') {
        out.errors.push(`cell ${index} wrote to stderr: ${String(o.text).slice(0, 400)}`);
      }
    }
  });
  return out;
}"""
)

_WIDGETS = """() => {
  const areas = [...document.querySelectorAll('.jp-Notebook .jp-OutputArea-output')];
  const views = areas.filter(a => a.querySelector('.jupyter-widgets') ||
                                  a.classList.contains('jupyter-widgets'));
  const failed = areas.filter(a => /Error displaying widget/.test(a.textContent || ''))
                      .map(a => (a.textContent || '').trim().slice(0, 200));
  return {
    views: views.length,
    surfaces: document.querySelectorAll('.jp-Notebook .wfkit-surface').length,
    failed,
  };
}"""

_DESCRIBE = """
function describe(el, withText = true) {
  const cell = el.closest('.jp-Cell');
  const cells = [...document.querySelectorAll('.jp-Notebook .jp-Cell')];
  const picked = el.tagName === 'SELECT' ? [...el.selectedOptions].map(o => o.text).join(', ')
                                         : el.value;
  const text = (picked || (el.tagName === 'SELECT' ? '(nothing picked)' : el.textContent) ||
                el.placeholder || el.getAttribute('aria-label') || '').trim();
  const classes = [...el.classList].filter(c => !c.startsWith('lm-') && !c.startsWith('p-'));
  return `cell ${cells.indexOf(cell)} <${el.tagName.toLowerCase()}` +
         (classes.length ? ` class="${classes.slice(0, 3).join(' ')}"` : '') + `>` +
         (withText ? ' ' + JSON.stringify(text.slice(0, 60)) : '');
}
function shown(el) {
  const r = el.getBoundingClientRect();
  return r.width > 0 && r.height > 0 && getComputedStyle(el).visibility !== 'hidden';
}
"""

_PICTURES = (
    "() => {"
    + _DESCRIBE
    + """
  const found = [];
  const pictures = document.querySelectorAll(
    '.jp-Notebook .jp-OutputArea-output img, .jp-Notebook .jp-OutputArea-output svg');
  for (const pic of pictures) {
    if (pic.tagName.toLowerCase() === 'svg' && pic.parentElement.closest('svg')) continue;
    if (!shown(pic)) continue;
    const r = pic.getBoundingClientRect();
    if (r.width < 40 && r.height < 40) continue;  // an icon, not a picture
    const area = pic.closest('.jp-OutputArea-output').getBoundingClientRect();
    if (r.width > area.width + 1 || r.right > area.right + 1) {
      found.push(`${describe(pic)}: ${Math.round(r.width)} px wide, right edge at ` +
                 `${Math.round(r.right)}, in an output area ${Math.round(area.width)} px wide ` +
                 `ending at ${Math.round(area.right)}`);
    }
  }
  return found;
}"""
)

_CLIPPED = (
    "() => {"
    + _DESCRIBE
    + """
  const found = [];
  const selector = ['button', 'label', 'input', 'select', 'textarea', '.widget-label',
                    '.widget-button', '.widget-toggle-button', '.widget-html-content',
                    '.lm-TabBar-tabLabel', 'td', 'th']
                   .map(s => '.jp-Notebook .jp-OutputArea-output ' + s);
  for (const el of document.querySelectorAll(selector.join(', '))) {
    if (!shown(el)) continue;
    if (el.tagName === 'INPUT' && ['checkbox', 'radio', 'range', 'color'].includes(el.type)) {
      continue;
    }
    if (el.scrollWidth > el.clientWidth + 1) {
      found.push(`${describe(el)}: content ${el.scrollWidth} px wide in ${el.clientWidth} px`);
    }
    // cut off by a box around it that hides (or scrolls) what overflows, up to the output area
    const r = el.getBoundingClientRect();
    const area = el.closest('.jp-OutputArea-output');
    for (let box = el.parentElement; box; box = box.parentElement) {
      if (box === area || getComputedStyle(box).overflowX !== 'visible') {
        const b = box.getBoundingClientRect();
        const left = b.left + box.clientLeft, right = left + box.clientWidth;
        if (r.right > right + 1 || r.left < left - 1) {
          const hidden = Math.round(Math.max(r.right - right, left - r.left));
          found.push(`${describe(el)}: ${hidden} px of its ${Math.round(r.width)} px cut off ` +
                     `by ${box === area ? 'the output area' : describe(box, false)}`);
          break;
        }
      }
      if (box === area) break;
    }
  }
  return [...new Set(found)];
}"""
)

_BROKEN_WORDS = (
    "() => {"
    + _DESCRIBE
    + """
  // a word or number the layout broke across two lines between two letters or digits
  const found = [];
  const holders = document.querySelectorAll(
    '.jp-Notebook .jp-OutputArea-output .jupyter-widgets td, ' +
    '.jp-Notebook .jp-OutputArea-output .jupyter-widgets th, ' +
    '.jp-Notebook .jp-OutputArea-output .jupyter-widgets pre, ' +
    '.jp-Notebook .jp-OutputArea-output .jupyter-widgets .widget-label, ' +
    '.jp-Notebook .jp-OutputArea-output .jupyter-widgets .widget-html-content');
  const range = document.createRange();
  const top = (node, i) => { range.setStart(node, i); range.setEnd(node, i + 1);
                             const r = range.getClientRects(); return r.length ? r[0].top : null; };
  for (const holder of holders) {
    if (!shown(holder)) continue;
    const walker = document.createTreeWalker(holder, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      const text = node.textContent;
      for (const m of text.matchAll(/\\S{2,}/g)) {
        range.setStart(node, m.index); range.setEnd(node, m.index + m[0].length);
        if (range.getClientRects().length < 2) continue;
        const first = top(node, m.index);
        for (let i = 1; i < m[0].length; i++) {
          const t = top(node, m.index + i);
          if (t !== null && first !== null && Math.abs(t - first) > 2) {
            if (/[A-Za-z0-9]/.test(m[0][i - 1]) && /[A-Za-z0-9]/.test(m[0][i])) {
              found.push(`${describe(node.parentElement)}: ${JSON.stringify(m[0].slice(0, 60))} ` +
                         `broken after ${JSON.stringify(m[0].slice(0, i))}`);
            }
            break;
          }
        }
      }
    }
  }
  return [...new Set(found)];
}"""
)

_FAINT = (
    "(least) => {"
    + _DESCRIBE
    + """
  // text in widget outputs whose colour is too close to the background behind it (WCAG contrast
  // ratio under `least`); Graphviz pictures carry their own background and are left out
  const rgba = (text) => {
    const m = text.match(/rgba?\\(([^)]+)\\)/);
    if (!m) return null;
    const [r, g, b, a] = m[1].split(/[ ,\\/]+/).filter(Boolean).map(Number);
    return [r, g, b, a === undefined || Number.isNaN(a) ? 1 : a];
  };
  const over = (top, under) => {
    const a = top[3];
    return [0, 1, 2].map(i => top[i] * a + under[i] * (1 - a)).concat([1]);
  };
  const background = (el) => {
    const layers = [];
    for (let node = el; node && node.nodeType === 1; node = node.parentElement) {
      const c = rgba(getComputedStyle(node).backgroundColor);
      if (c && c[3] > 0) { layers.push(c); if (c[3] >= 1) break; }
    }
    let colour = [255, 255, 255, 1];
    for (const layer of layers.reverse()) colour = over(layer, colour);
    return colour;
  };
  const opacity = (el) => {
    let o = 1;
    for (let node = el; node && node.nodeType === 1; node = node.parentElement) {
      o *= Number(getComputedStyle(node).opacity || 1);
    }
    return o;
  };
  const luminance = (c) => {
    const [r, g, b] = c.slice(0, 3).map(v => {
      v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  };
  const found = [];
  const candidates = document.querySelectorAll(
    '.jp-Notebook .jp-OutputArea-output .jupyter-widgets *');
  for (const el of candidates) {
    const own = [...el.childNodes].some(n => n.nodeType === 3 && n.textContent.trim());
    if (!own || !shown(el)) continue;
    const svg = el.closest('svg');
    if (svg && (svg.closest('.wfkit-surface-stage') || svg.querySelector('g.graph'))) continue;
    const style = getComputedStyle(el);
    let fg = rgba(svg ? style.fill : style.color);
    if (!fg) continue;
    const bg = background(svg ? svg.parentElement : el);
    fg = over([fg[0], fg[1], fg[2], fg[3] * opacity(el)], bg);
    const [hi, lo] = [luminance(fg), luminance(bg)].sort((x, y) => y - x);
    const ratio = (hi + 0.05) / (lo + 0.05);
    if (ratio < least) {
      const hex = (c) => '#' + c.slice(0, 3)
        .map(v => Math.round(v).toString(16).padStart(2, '0')).join('');
      found.push(`${describe(el)}: ${hex(fg)} on ${hex(bg)}, contrast ${ratio.toFixed(2)}:1`);
    }
  }
  return [...new Set(found)];
}"""
)

_TABS = """() => [...document.querySelectorAll(
    '.jp-Notebook .jp-OutputArea-output .jupyter-widget-tab > .lm-TabBar .lm-TabBar-tab, '
    + '.jp-Notebook .jp-OutputArea-output .widget-tab > .lm-TabBar .lm-TabBar-tab')].length"""


@dataclass
class Progress:
    kernel: str
    running: int
    unrun: list[int]
    errors: list[str]

    @property
    def done(self) -> bool:
        return self.kernel == "idle" and self.running == 0 and (not self.unrun or bool(self.errors))


@dataclass
class LabPage:
    """One notebook open in one page of the Lab server."""

    server: LabServer
    page: Page
    path: str  # relative to the server's root, e.g. "dark/04-visual-editor.ipynb"
    interface: str = "lab"  # or "notebook": Notebook 7's page of the same notebook
    scope: str = ".jp-Notebook"
    """Where the checks look for outputs: the notebook, or e.g. ``.jupyterlab-sidecar`` (a
    side panel's output area)."""

    def _js(self, script: str) -> str:
        return script.replace(".jp-Notebook ", f"{self.scope} ")

    def open(self, theme: str) -> None:
        """Load the notebook with ``?reset``, wait for its idle kernel, then apply ``theme``."""
        self.page.goto(self.server.url(self.path, self.interface), wait_until="domcontentloaded")
        self.page.wait_for_function(_READY, arg=self.path, timeout=90_000, polling=200)
        self.set_theme(theme)

    def set_theme(self, theme: str) -> None:
        """Switch JupyterLab to ``theme`` (a key of THEMES), as its Settings menu does."""
        self.page.evaluate(
            "(theme) => window.jupyterapp.commands.execute('apputils:change-theme', {theme})",
            THEMES[theme],
        )
        self.page.wait_for_function(
            "(theme) => document.body.dataset.jpThemeName === theme",
            arg=THEMES[theme],
            timeout=30_000,
        )

    def run_all(self, timeout: float = RUN_TIMEOUT) -> Progress:
        """Run All, then wait until every code cell has run (or one failed) and the kernel is
        idle twice in a row, half a second apart."""
        self.page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
        deadline = time.monotonic() + timeout
        steady = 0
        progress = self.progress()
        while steady < 2:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{self.path}: Run All did not finish in {timeout:.0f} s: {progress}"
                )
            time.sleep(0.5)
            progress = self.progress()
            steady = steady + 1 if progress.done else 0
        return progress

    def progress(self) -> Progress:
        return Progress(**self.page.evaluate(_PROGRESS))

    def widgets(self) -> dict[str, Any]:
        return dict(self.page.evaluate(self._js(_WIDGETS)))

    def wait_for_widgets(self, views: int, surfaces: int, timeout: float = 30.0) -> dict[str, Any]:
        """Wait until at least ``views`` widget views and ``surfaces`` graph surfaces show."""
        deadline = time.monotonic() + timeout
        seen = self.widgets()
        while seen["views"] < views or seen["surfaces"] < surfaces:
            if seen["failed"] or time.monotonic() > deadline:
                break
            time.sleep(0.25)
            seen = self.widgets()
        self.page.wait_for_timeout(500)  # the last views lay out
        return self.widgets()

    def oversized_pictures(self) -> list[str]:
        return list(self.page.evaluate(self._js(_PICTURES)))

    def clipped(self) -> list[str]:
        return list(self.page.evaluate(self._js(_CLIPPED)))

    def broken_words(self) -> list[str]:
        return list(self.page.evaluate(self._js(_BROKEN_WORDS)))

    def faint_text(self, least: float = MIN_CONTRAST) -> list[str]:
        return list(self.page.evaluate(self._js(_FAINT), least))

    def tab_count(self) -> int:
        return int(self.page.evaluate(self._js(_TABS)))

    def select_tab(self, index: int) -> str:
        """Click the ``index``-th tab of the widget outputs' tab bars; return its label."""
        tab = self.page.locator(
            f"{self.scope} .jp-OutputArea-output .jupyter-widget-tab > .lm-TabBar .lm-TabBar-tab, "
            f"{self.scope} .jp-OutputArea-output .widget-tab > .lm-TabBar .lm-TabBar-tab"
        ).nth(index)
        tab.scroll_into_view_if_needed()
        tab.click()
        self.page.wait_for_timeout(600)  # the kernel answers (a refresh), the panel lays out
        return tab.inner_text().strip()
