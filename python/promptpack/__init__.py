"""promptpack for Python: prompts from signed, encrypted packs, verified before use, with
release pins, rollouts and wholesale fallback to the prompts you bundle.

    import promptpack

    client = promptpack.Client(
        cache_dir="~/.cache/my-agent/promptpack",
        builtin_dir="prompts/",            # the prompts you ship; served when nothing else can be
        config="promptpack.toml",          # the same file pack-client reads (server, channel, keys)
        client_version="1.4.0",            # your app's version: the channel's release pins use it
    )
    client.start()                          # refresh every six hours and watch, in the background
    text, snapshot, fallback = client.serve("agents/main/system.hbs", {"user": "ada"})

See docs/PYTHON.md in the promptpack repository.
"""

from ._native import Client, PromptpackError, RenderError, Snapshot

__all__ = ["Client", "PromptpackError", "RenderError", "Snapshot"]
