"""Which refusals mean "the prompt is longer than the context window"."""

import pytest

from agentproc.providers._common import is_context_overflow


@pytest.mark.parametrize(
    "status, texts",
    [
        (400, ("context_length_exceeded", "This model's maximum context length is 8192 tokens.")),
        (400, ("invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum")),
        (
            400,
            (
                "INVALID_ARGUMENT",
                "The input token count (1200000) exceeds the maximum number of tokens allowed "
                "(1048576).",
            ),
        ),
        (413, ("Request too large: input is too long for the model",)),
    ],
)
def test_overflow_messages_of_each_provider(status, texts):
    assert is_context_overflow(status, *texts)


@pytest.mark.parametrize(
    "status, texts",
    [
        (400, ("invalid_value", "Invalid value for 'temperature': must be <= 2.")),
        (400, ("max_tokens: 999999 > 64000, the maximum for this model",)),
        (429, ("rate_limit_exceeded", "too many tokens per minute")),
        (500, ("maximum context length",)),
    ],
)
def test_other_refusals_are_not_overflow(status, texts):
    assert not is_context_overflow(status, *texts)
