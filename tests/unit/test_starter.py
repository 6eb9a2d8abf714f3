"""``threadline new``: the starter project it writes, and what it refuses (writing nothing)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from threadline.__main__ import main
from threadline.starter import StarterError, create, project_name

FILES = [".dev.vars.example", ".gitignore", "README.md", "package.json", "pyproject.toml",
         "src/app.py", "src/entry.py", "tests/test_app.py", "wrangler.toml"]


def test_the_starter_writes_a_worker_project_named_after_its_directory(tmp_path: Path) -> None:
    project = tmp_path / "Support_Bot"
    written = create(project)
    assert [str(path) for path in written] == FILES
    pyproject = tomllib.loads((project / "pyproject.toml").read_text())
    assert pyproject["project"]["name"] == "support-bot"
    assert pyproject["project"]["dependencies"] == ["threadline"]
    assert "tool" in pyproject and "uv" not in pyproject["tool"]
    wrangler = tomllib.loads((project / "wrangler.toml").read_text())
    assert wrangler["main"] == "src/entry.py"
    assert wrangler["compatibility_flags"] == ["python_workers"]
    assert wrangler["durable_objects"]["bindings"] == [
        {"name": "THREADS", "class_name": "ThreadObject"}]
    assert wrangler["migrations"][0]["new_sqlite_classes"] == ["ThreadObject"]
    # The agents import without the Workers runtime; only entry.py names threadline.worker.
    assert "threadline.worker" not in (project / "src/app.py").read_text()
    assert "from app import app" in (project / "src/entry.py").read_text()
    assert "pip install threadline pytest" in (project / "README.md").read_text()
    assert ".dev.vars" in (project / ".gitignore").read_text().splitlines()
    # The local runtime's Node.js side is the one this checkout's runtime is tested with.
    node = json.loads((project / "package.json").read_text())
    ours = json.loads((Path(__file__).resolve().parents[2] / "package.json").read_text())
    assert node["name"] == "support-bot"
    assert node["devDependencies"] == ours["devDependencies"]


def test_with_a_wheel_the_project_depends_on_its_copy(tmp_path: Path) -> None:
    wheel = tmp_path / "threadline-0.1.0-py3-none-any.whl"
    wheel.write_bytes(b"not really a wheel, but named like one")
    project = tmp_path / "app"
    written = create(project, "my-app", wheel=wheel)
    assert Path("wheels") / wheel.name in written
    pyproject = tomllib.loads((project / "pyproject.toml").read_text())
    assert pyproject["tool"]["uv"]["sources"]["threadline"] == {"path": f"wheels/{wheel.name}"}
    assert (project / "wheels" / wheel.name).read_bytes() == wheel.read_bytes()
    assert f"pip install wheels/{wheel.name} pytest" in (project / "README.md").read_text()


@pytest.mark.parametrize("name", ["Bad Name", "1app", "-app", "app_x", "a" * 64, ""])
def test_a_bad_name_is_refused_and_nothing_is_written(tmp_path: Path, name: str) -> None:
    with pytest.raises(StarterError, match="must match"):
        create(tmp_path / "project", name)
    assert not (tmp_path / "project").exists()


def test_a_directory_in_the_way_is_refused_and_left_alone(tmp_path: Path) -> None:
    (tmp_path / "keep.txt").write_text("mine")
    with pytest.raises(StarterError, match="not an empty directory"):
        create(tmp_path)
    assert [path.name for path in tmp_path.iterdir()] == ["keep.txt"]
    file = tmp_path / "keep.txt"
    with pytest.raises(StarterError, match="not an empty directory"):
        create(file)


def test_a_file_that_is_not_a_threadline_wheel_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "other-1.0-py3-none-any.whl"
    other.write_bytes(b"")
    with pytest.raises(StarterError, match="not a threadline wheel"):
        create(tmp_path / "project", wheel=other)
    with pytest.raises(StarterError, match="not a threadline wheel"):
        create(tmp_path / "project", wheel=tmp_path / "threadline-0.1.0-py3-none-any.whl")
    assert not (tmp_path / "project").exists()


def test_an_unusable_directory_name_falls_back_to_a_default() -> None:
    assert project_name(Path("/tmp/__")) == "threadline-app"
    assert project_name(Path("/tmp/My Agents")) == "my-agents"


def test_the_command_line_writes_the_starter_and_reports_a_refusal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["new", str(tmp_path / "ok")]) == 0
    assert "wrote" in capsys.readouterr().out
    assert main(["new", str(tmp_path / "ok")]) == 2
    assert "not an empty directory" in capsys.readouterr().err
    assert main(["new", str(tmp_path / "bad"), "--name", "Nope"]) == 2
    assert "must match" in capsys.readouterr().err


def test_a_write_that_fails_midway_is_refused_and_leaves_nothing_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = Path.write_text
    written: list[Path] = []

    def failing(self: Path, *args: object, **kwargs: object) -> int:
        if len(written) == 3:
            raise OSError(28, "No space left on device")
        written.append(self)
        return real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "write_text", failing)
    with pytest.raises(StarterError, match="No space left on device"):
        create(tmp_path / "deep" / "project")
    assert list(tmp_path.iterdir()) == []
    empty = tmp_path / "empty"
    empty.mkdir()
    written.clear()
    with pytest.raises(StarterError):
        create(empty)
    # A directory that was there (empty) stays, empty.
    assert empty.is_dir() and list(empty.iterdir()) == []


def test_a_directory_under_a_file_is_refused_on_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "file").write_text("mine")
    assert main(["new", str(tmp_path / "file" / "project")]) == 2
    assert "threadline new:" in capsys.readouterr().err
    assert (tmp_path / "file").read_text() == "mine"
