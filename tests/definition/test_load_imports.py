"""Loading a definition runs no code: the data model it names is never imported unless allowed.

``Workflow.from_json`` used to import whatever module ``data_model`` named: ``"this:x"``
printed the Zen of Python. Now a model is taken from ``data=``, from ``models=``, or from a
module the process has already imported; a module is imported only when ``allow_imports``
allows it. A model found nowhere is kept as text and reported by ``validate()``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import BaseModel

import wfkit as wf
from wfkit.examples import all_workflows
from wfkit.examples.fulfilment import OrderData

MODULE = "wfkit_loadtest_sidefx"
"""A module that announces, on stdout and in a file, that it was imported."""


def document(data_model: str) -> str:
    data = wf.Workflow("w").start_with("a").to_data() | {"data_model": data_model}
    return json.dumps(data)


@pytest.fixture
def side_effect_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    marker = tmp_path / "imported"
    (tmp_path / f"{MODULE}.py").write_text(
        textwrap.dedent(
            f"""
            from pathlib import Path
            from pydantic import BaseModel
            print("IMPORTED {MODULE}")
            Path({str(marker)!r}).write_text("yes")

            class Model(BaseModel):
                total: int = 0

            def __getattr__(name):
                Path({str(marker)!r}).write_text("getattr " + name)
                raise AttributeError(name)
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop(MODULE, None)
    yield marker
    sys.modules.pop(MODULE, None)


def test_loading_a_document_naming_this_imports_nothing_and_prints_nothing() -> None:
    # in a fresh interpreter, so that nothing else has imported `this` before
    script = textwrap.dedent(
        f"""
        import json, sys
        import wfkit as wf
        flow = wf.Workflow.from_json({document("this:x")!r})
        print(json.dumps({{
            "imported": "this" in sys.modules,
            "model": repr(flow.data_model),
            "ref": flow.data_model_ref,
            "codes": [p.code for p in flow.validate(registry=None)],
        }}))
        """
    )
    env = {**os.environ, "PYTHONPATH": str(Path(wf.__file__).parents[1])}
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        env=env,
    )
    assert "Zen of Python" not in done.stdout
    assert json.loads(done.stdout) == {
        "imported": False,
        "model": "None",
        "ref": "this:x",
        "codes": ["data-model-not-loaded"],
    }


def test_a_model_in_a_module_not_imported_is_not_imported(
    side_effect_module: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    flow = wf.Workflow.from_json(document(f"{MODULE}:Model"))
    assert MODULE not in sys.modules
    assert not side_effect_module.exists()
    assert "IMPORTED" not in capfd.readouterr().out
    assert (flow.data_model, flow.data_model_ref) == (None, f"{MODULE}:Model")
    [problem] = flow.validate(registry=None)
    assert problem.code == "data-model-not-loaded"
    assert problem.severity is wf.Severity.ERROR
    assert f"'{MODULE}:Model' was not loaded" in problem.message
    assert json.loads(flow.to_json())["data_model"] == f"{MODULE}:Model"  # kept as written


@pytest.mark.parametrize("allowed", [True, (MODULE,), [f"{MODULE}."], MODULE])
def test_allow_imports_imports_the_modules_it_names(
    side_effect_module: Path, allowed: bool | tuple[str, ...] | list[str] | str
) -> None:
    flow = wf.Workflow.from_json(document(f"{MODULE}:Model"), allow_imports=allowed)
    assert side_effect_module.read_text() == "yes"
    assert flow.data_model is sys.modules[MODULE].Model
    assert flow.data_model_ref is None
    assert flow.validate(registry=None) == []


@pytest.mark.parametrize("allowed", [False, (), ("wfkit.",), (f"{MODULE}x",), (MODULE[:-2],)])
def test_allow_imports_is_a_package_prefix_not_a_string_prefix(
    side_effect_module: Path, allowed: bool | tuple[str, ...]
) -> None:
    flow = wf.Workflow.from_json(document(f"{MODULE}:Model"), allow_imports=allowed)
    assert not side_effect_module.exists()
    assert flow.data_model is None


def test_models_given_by_the_caller_are_used_without_importing(side_effect_module: Path) -> None:
    class Model(BaseModel):
        total: int = 0

    by_path = wf.Workflow.from_json(document(f"{MODULE}:Model"), models={f"{MODULE}:Model": Model})
    assert by_path.data_model is Model
    ref = f"{Model.__module__}:{Model.__qualname__}"
    by_class = wf.Workflow.from_json(document(ref), models=[Model])
    assert by_class.data_model is Model
    alone = wf.Workflow.from_json(document(ref), models=Model)
    assert alone.data_model is Model
    assert not side_effect_module.exists()
    # a class defined in a function cannot be looked up: it is kept as text and reported
    missing = wf.Workflow.from_json(document(ref))
    assert (missing.data_model, missing.data_model_ref) == (None, ref)
    assert [p.code for p in missing.validate(registry=None)] == ["data-model-not-loaded"]


def test_a_loaded_module_is_read_without_running_its_getattr(side_effect_module: Path) -> None:
    wf.Workflow.from_json(document(f"{MODULE}:Model"), allow_imports=True)
    side_effect_module.unlink()
    flow = wf.Workflow.from_json(document(f"{MODULE}:Missing"))
    assert not side_effect_module.exists()  # module __getattr__ was not called
    assert (flow.data_model, flow.data_model_ref) == (None, f"{MODULE}:Missing")


def test_a_model_of_a_module_already_imported_is_found() -> None:
    flow = wf.Workflow.from_json(all_workflows()["fulfilment"].to_json())
    assert flow.data_model is OrderData
    assert flow.validate() == []


@pytest.mark.parametrize("ref", ["os:system", "wfkit.examples.checkout:reserve"])
def test_a_loaded_name_that_is_not_a_model_is_refused(ref: str) -> None:
    with pytest.raises(wf.DefinitionError, match="not a pydantic model"):
        wf.Workflow.from_json(document(ref))


@pytest.mark.parametrize("ref", ["no colon", "a:b:c", "os:system()", ":x", "x:", 5, ["m:X"]])
def test_a_data_model_that_is_not_a_path_is_a_definition_error(ref: object) -> None:
    data = json.loads(document("m:X")) | {"data_model": ref}
    with pytest.raises(wf.DefinitionError, match="'module:Name'"):
        wf.Workflow.from_json(json.dumps(data))


def test_an_engine_still_loads_its_registered_models_back(tmp_path: Path) -> None:
    # the engine's own store was written by register() from real classes: it may import
    path = tmp_path / "runs.duckdb"
    engine = wf.Engine(path, registry=None)
    engine.register(all_workflows()["fulfilment"])
    engine.close()
    again = wf.Engine(path, registry=None)
    try:
        assert again.definition("fulfilment").data_model is OrderData
    finally:
        again.close()


def test_a_wait_payload_model_is_looked_up_never_imported() -> None:
    """A wait's ``payload="module:Model"`` comes from the definition: it is found among the
    modules already imported, and a module not loaded is named in the error, not imported."""
    from wfkit.definition.workflow import import_model
    from wfkit.errors import DefinitionError

    found = import_model("pydantic:BaseModel", "the payload model of wait 'go'")
    assert found is BaseModel
    assert "antigravity" not in sys.modules
    with pytest.raises(DefinitionError, match="not loaded in this process"):
        import_model("antigravity:Thing", "the payload model of wait 'go'")
    assert "antigravity" not in sys.modules  # never imported (it would open a browser)
