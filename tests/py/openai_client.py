"""Stream a chat completion with usage from an OpenAI-compatible server using the official client.

Usage: python openai_client.py BASE_URL   (e.g. http://127.0.0.1:8000/v1)

Prints one JSON object summarising what the client saw; exits non-zero on any error.
"""

import json
import sys

from openai import OpenAI


def stream_once(client, prompt):
    stream = client.chat.completions.create(
        model="sim-model",
        messages=[{"role": "user", "content": prompt}],
        max_tokens=16,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    content, chunks, finish, usage = "", 0, None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            if choice.delta.content:
                content += choice.delta.content
                chunks += 1
            if choice.finish_reason is not None:
                finish = choice.finish_reason
    return content, chunks, finish, usage


def main():
    client = OpenAI(base_url=sys.argv[1], api_key="unused", max_retries=0)
    prompt = " ".join(f"w{i}" for i in range(40))
    content, chunks, finish, usage = stream_once(client, prompt)
    _, _, _, usage2 = stream_once(client, prompt)
    details = usage2.prompt_tokens_details
    whole = client.chat.completions.create(
        model="sim-model",
        messages=[{"role": "user", "content": "say something"}],
        max_tokens=5,
        extra_body={"ignore_eos": True},
    )
    print(
        json.dumps(
            {
                "content_tokens": len(content.split()),
                "chunks": chunks,
                "finish_reason": finish,
                "prompt_tokens": usage.prompt_tokens,
                "completion_tokens": usage.completion_tokens,
                "total_tokens": usage.total_tokens,
                "second_cached_tokens": details.cached_tokens if details else None,
                "non_stream_tokens": len(whole.choices[0].message.content.split()),
                "non_stream_usage": whole.usage.completion_tokens,
            }
        )
    )


if __name__ == "__main__":
    main()
