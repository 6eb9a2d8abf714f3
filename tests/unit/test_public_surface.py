import subprocess
import sys

import threadline
from threadline import errors


def test_all_is_sorted_unique_and_importable() -> None:
    assert list(threadline.__all__) == sorted(set(threadline.__all__))
    for name in threadline.__all__:
        assert getattr(threadline, name) is not None


def test_importing_threadline_never_loads_the_platform() -> None:
    code = (
        "import sys, threadline, threadline.storage.cloudflare;"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('workers', 'js', 'pyodide')];"
        "print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_importing_threadline_never_loads_pydantic_ai() -> None:
    # The optional extra is imported only by code that imports threadline.pydantic_ai, and that
    # package loads the OpenAI SDK only when its OpenAI helpers are used.
    code = (
        "import sys, threadline, threadline.testing, threadline.client;"
        "before = sorted({m.split('.')[0] for m in sys.modules} & {'pydantic_ai', 'openai'});"
        "import threadline.pydantic_ai;"
        "after = sorted({m.split('.')[0] for m in sys.modules} & {'pydantic_ai', 'openai'});"
        "threadline.pydantic_ai.openai_model;"
        "print(before, after, 'openai' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[] ['pydantic_ai'] True"


def test_error_tree() -> None:
    assert issubclass(errors.SchemaError, errors.StorageError)
    for api in (errors.ValidationFailed, errors.Unauthorized, errors.NotFound, errors.Conflict,
                errors.PayloadTooLarge):
        assert issubclass(api, errors.ApiError)
        assert issubclass(api, errors.ThreadlineError)
    assert issubclass(errors.NonRetryable, errors.AgentError)
    assert issubclass(errors.RetryableAgentError, errors.AgentError)
    assert not issubclass(errors.Evicted, Exception)
    assert issubclass(errors.Evicted, BaseException)
    assert errors.Conflict("x").status == 409
    assert errors.NotFound("x").code == errors.ErrorCode.NOT_FOUND
    assert errors.ValidationFailed("bad json", status=400).status == 400
    codes = {cls.code for cls in vars(errors).values()
             if isinstance(cls, type) and issubclass(cls, errors.ThreadlineError)}
    assert len(codes) == len(errors.ErrorCode)
