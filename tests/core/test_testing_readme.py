"""The "Testing your agents" example of README.md runs exactly as written."""

import re
from pathlib import Path
from typing import Any

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_readme_testing_example_runs_as_written() -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
    examples = [block for block in blocks if "threadline.testing" in block]
    assert len(examples) == 1, "README should show one SimulatedObject example"
    namespace: dict[str, Any] = {"__name__": "readme_example"}
    exec(compile(examples[0], str(README), "exec"), namespace)
    tests = [fn for name, fn in namespace.items() if name.startswith("test_")]
    assert tests, "the example defines a test"
    for test in tests:
        test()
