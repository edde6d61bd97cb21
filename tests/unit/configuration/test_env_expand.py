"""`${NAME}` references: replaced from the environment, `$$` a literal `$`, anything else
refused."""

from __future__ import annotations

import pytest

from configuration.env_expand import UnsetVariable, expand_env


def test_expand_replaces_references_and_keeps_other_dollars() -> None:
    env = {"POD_NAME": "web-7", "POD_NAMESPACE": "shop"}
    assert expand_env("${POD_NAMESPACE}/${POD_NAME}", env) == "shop/web-7"
    assert expand_env("cost $5 and $$ and $HOME", env) == "cost $5 and $ and $HOME"
    assert expand_env("$${POD_NAME}", env) == "${POD_NAME}"


@pytest.mark.parametrize("text, message", [
    ("${NODE_NAME}", "environment variable NODE_NAME is not set"),
    ("${1BAD}", "'${1BAD}' is not a valid reference"),
    ("${OPEN", "'${OPEN' is not a valid reference"),
])
def test_expand_refuses_unset_and_malformed_references(text: str, message: str) -> None:
    with pytest.raises(UnsetVariable, match=message.replace("$", r"\$").replace("{", r"\{")):
        expand_env(text, {})
