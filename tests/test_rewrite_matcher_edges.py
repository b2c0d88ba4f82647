"""Edge cases of the rewrites ported to libcst matchers: what they accept and where they stop."""

from __future__ import annotations

from tfdiag_magic.rewrite import vectorise_element_loop


def test_size_spellings_accepted_as_before():
    # Kept from the ast version: any literal equal to 0, and keywords to len().
    for size in ("a.shape[0.0]", "a.shape[0]", "len(a, key=1)", "len(a)"):
        source = f"import numpy as np\nfor i in range({size}):\n    a[i] = a[i] * 2\n"
        assert vectorise_element_loop(source) == "import numpy as np\na[:] = np.asarray(a) * 2\n"
    source = "import numpy as np\nfor i in range(a.shape[1]):\n    a[i] = a[i] * 2\n"
    assert vectorise_element_loop(source) is None


def test_list_passed_to_a_computed_callee_is_left_alone():
    source = """import numpy as np
funcs = [np.array]
out = []
for x in a:
    out.append(x * 2)
funcs[0](out)
"""
    assert vectorise_element_loop(source) is None  # the ast version raised AttributeError


def test_async_for_is_left_alone():
    source = """import numpy as np
async def f(a):
    out = []
    async for x in a:
        out.append(x * 2)
    return np.array(out)
"""
    assert vectorise_element_loop(source) is None  # the ast version raised ValueError
