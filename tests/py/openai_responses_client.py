"""Stream a Responses API reply from an OpenAI-compatible server using the official client.

Usage: python openai_responses_client.py BASE_URL   (e.g. http://127.0.0.1:8000/v1)

Streams raw events twice (the second reads the first's prompt from the prefix cache), streams once
through the client's stream helper, asks for one reply without streaming, and sends a prompt longer
than the context. Prints one JSON object summarising what the client saw; exits non-zero on any
other error.
"""

import json
import sys

import openai
from openai import OpenAI

MODEL = "sim-model"


def stream_raw(client, prompt):
    stream = client.responses.create(
        model=MODEL,
        instructions="answer in plain words",
        input=[{"role": "user", "content": [{"type": "input_text", "text": prompt}]}],
        max_output_tokens=16,
        stream=True,
        store=False,
        extra_body={"ignore_eos": True},
    )
    types, text, deltas, final = [], "", 0, None
    for event in stream:
        types.append(event.type)
        if event.type == "response.output_text.delta":
            text += event.delta
            deltas += 1
        if event.type in ("response.completed", "response.incomplete"):
            final = event.response
    return types, text, deltas, final


def main():
    client = OpenAI(base_url=sys.argv[1], api_key="unused", max_retries=0)
    prompt = " ".join(f"w{i}" for i in range(40))
    types, text, deltas, final = stream_raw(client, prompt)
    _, _, _, second = stream_raw(client, prompt)
    history = [
        {"role": "user", "content": [{"type": "input_text", "text": "first question"}]},
        {"role": "assistant", "content": [{"type": "output_text", "text": "first answer"}]},
        {"role": "user", "content": "second question"},
    ]
    # Without ignore_eos and below its limit the reply stops on its own: `response.completed`,
    # which the stream helper's final response needs.
    with client.responses.stream(model=MODEL, input=history, max_output_tokens=4096) as stream:
        helper_deltas = sum(1 for e in stream if e.type == "response.output_text.delta")
        helper_final = stream.get_final_response()
    whole = client.responses.create(
        model=MODEL, input="say something", max_output_tokens=5, extra_body={"ignore_eos": True}
    )
    try:
        client.responses.create(model=MODEL, input="x " * 200000, max_output_tokens=5)
        overflow = None
    except openai.BadRequestError as error:
        overflow = {"status": error.status_code, "message": error.message}
    print(
        json.dumps(
            {
                "first": types[0],
                "last": types[-1],
                "event_types": sorted(set(types)),
                "content_tokens": len(text.split()),
                "deltas": deltas,
                "status": final.status,
                "incomplete_reason": final.incomplete_details.reason,
                "output_text": final.output_text,
                "text": text,
                "input_tokens": final.usage.input_tokens,
                "cached_tokens": final.usage.input_tokens_details.cached_tokens,
                "output_tokens": final.usage.output_tokens,
                "total_tokens": final.usage.total_tokens,
                "second_cached_tokens": second.usage.input_tokens_details.cached_tokens,
                "helper_deltas": helper_deltas,
                "helper_input_tokens": helper_final.usage.input_tokens,
                "helper_output_tokens": helper_final.usage.output_tokens,
                "helper_output_words": len(helper_final.output_text.split()),
                "helper_status": helper_final.status,
                "non_stream_tokens": len(whole.output_text.split()),
                "non_stream_usage": whole.usage.output_tokens,
                "non_stream_status": whole.status,
                "overflow": overflow,
            }
        )
    )


if __name__ == "__main__":
    main()
