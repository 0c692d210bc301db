"""An agent process driven by the Gemini API (a local fake speaking the real wire), through the
`google-genai` SDK: the tool loop, with Gemini's thought signatures kept across the tool call."""

from tests.e2e.conftest import write_bundle
from tests.e2e.test_openai_agent import BUNDLE, CALC
from tests.fakes.google_server import FakeGoogleServerThread

GOOGLE = (
    BUNDLE.replace("provider: openai", "provider: google")
    .replace("model: gpt-test", "model: gemini-test")
    .replace("FAKE_OPENAI_KEY", "FAKE_GEMINI_KEY")
)


def test_tool_loop_against_the_gemini_api(start_daemon, tmp_path):
    with FakeGoogleServerThread(api_key="g-test") as server:
        bundle = write_bundle(
            tmp_path / "b", GOOGLE % {"endpoint": server.base_url}, {"calc.py": CALC}
        )
        call = {"name": "calc__add", "arguments": {"a": 2, "b": 3}, "thoughtSignature": "c2lnLTE="}
        server.queue_reply(tool_calls=[call])
        server.queue_reply(text="2 + 3 = 5")
        daemon = start_daemon(bundle, env={"FAKE_GEMINI_KEY": "g-test"})

        proc = daemon.send("add 2 and 3")

        assert proc.returncode == 0, proc.stderr + daemon.logs()
        assert proc.stdout.strip() == "2 + 3 = 5"
        first, second = server.requests
        assert first["_model"] == "gemini-test"
        assert first["systemInstruction"]["parts"] == [{"text": "You are terse."}]
        assert first["generationConfig"] == {"temperature": 0.3, "maxOutputTokens": 256}
        model_turn, results = second["contents"][-2:]
        [part] = model_turn["parts"]
        assert part["functionCall"]["name"] == "calc__add"
        assert part["thoughtSignature"] == "c2lnLTE="  # sent back, as Gemini 3 requires
        [response] = results["parts"]
        assert response["functionResponse"]["name"] == "calc__add"
        assert response["functionResponse"]["response"] == {"status": "ok", "output": {"sum": 5}}
        assert server.api_keys == ["g-test", "g-test"]
