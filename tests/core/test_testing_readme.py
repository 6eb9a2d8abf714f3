"""The "Testing your agents" examples of README.md run exactly as written: the simulated
object, and an agent's model call answered by the fake provider on the object's clock."""

import re
from pathlib import Path
from typing import Any

README = Path(__file__).resolve().parents[2] / "README.md"


def _examples() -> list[str]:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
    return [block for block in blocks if "threadline.testing" in block]


def _run(example: str) -> None:
    namespace: dict[str, Any] = {"__name__": "readme_example"}
    exec(compile(example, str(README), "exec"), namespace)
    tests = [fn for name, fn in namespace.items() if name.startswith("test_")]
    assert tests, "the example defines a test"
    for test in tests:
        test()


def test_the_readme_shows_the_test_kit_twice() -> None:
    examples = _examples()
    assert len(examples) == 2, "README should show SimulatedObject, then FakeProvider with it"
    assert "FakeProvider" not in examples[0] and "FakeFetch(provider.handler" in examples[1]


def test_the_readme_testing_example_runs_as_written() -> None:
    _run(_examples()[0])


def test_the_readme_fake_provider_example_runs_as_written() -> None:
    _run(_examples()[1])
