"""Stream a message from an Anthropic Messages API server using the official `anthropic` client.

Usage: python anthropic_client.py BASE_URL   (e.g. http://127.0.0.1:8000)

Prints one JSON object summarising what the client saw; exits non-zero on any error.
"""

import json
import sys

import anthropic


def raw_events(client, prompt):
    """The event types of a raw stream, its text and its usage."""
    stream = client.messages.create(
        model="sim-model",
        system=[{"type": "text", "text": "you are a simulator"}],
        messages=[{"role": "user", "content": [{"type": "text", "text": prompt}]}],
        max_tokens=16,
        stream=True,
        extra_body={"ignore_eos": True},
    )
    types, text, deltas, start_usage, delta_usage, stop = [], "", 0, None, None, None
    for event in stream:
        types.append(event.type)
        if event.type == "message_start":
            start_usage = event.message.usage
        elif event.type == "content_block_delta" and event.delta.type == "text_delta":
            text += event.delta.text
            deltas += 1
        elif event.type == "message_delta":
            delta_usage = event.usage
            stop = event.delta.stop_reason
    return types, text, deltas, start_usage, delta_usage, stop


def main():
    client = anthropic.Anthropic(base_url=sys.argv[1], api_key="unused", max_retries=0)
    prompt = " ".join(f"w{i}" for i in range(40))
    types, text, deltas, start, end, stop = raw_events(client, prompt)
    # The same prompt again: its full blocks come from the prefix cache.
    _, _, _, again, _, _ = raw_events(client, prompt)
    # The helper that accumulates the stream into a message.
    with client.messages.stream(
        model="sim-model",
        messages=[{"role": "user", "content": "say something"}],
        max_tokens=5,
        extra_body={"ignore_eos": True},
    ) as s:
        streamed_text = "".join(s.text_stream)
        final = s.get_final_message()
    whole = client.messages.create(
        model="sim-model",
        messages=[{"role": "user", "content": "say something"}],
        max_tokens=5,
        extra_body={"ignore_eos": True},
    )
    try:
        client.messages.create(
            model="sim-model",
            messages=[{"role": "user", "content": "x " * 200_000}],
            max_tokens=5,
        )
        overflow = None
    except anthropic.BadRequestError as e:
        overflow = {"status": e.status_code, "type": e.body["error"]["type"], "message": e.body["error"]["message"]}
    print(
        json.dumps(
            {
                "event_types": sorted(set(types)),
                "first": types[0],
                "last": types[-1],
                "content_tokens": len(text.split()),
                "deltas": deltas,
                "stop_reason": stop,
                "input_tokens": start.input_tokens,
                "cache_read_input_tokens": start.cache_read_input_tokens,
                "output_tokens": end.output_tokens,
                "second_cache_read_input_tokens": again.cache_read_input_tokens,
                "second_input_tokens": again.input_tokens,
                "helper_tokens": len(streamed_text.split()),
                "helper_final_stop": final.stop_reason,
                "helper_final_output_tokens": final.usage.output_tokens,
                "non_stream_tokens": len(whole.content[0].text.split()),
                "non_stream_usage": whole.usage.output_tokens,
                "overflow": overflow,
            }
        )
    )


if __name__ == "__main__":
    main()
