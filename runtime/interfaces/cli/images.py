"""`codecoder image`: any local image made a @docker sandbox image (the agent, runas and the
user added), or the Dockerfile that does it printed."""

from __future__ import annotations

import argparse

from codecoder.interfaces.cli.exit_codes import EXIT_OK
from codecoder.interfaces.cli.inputs import usage
from codecoder.interfaces.cli.output import print_json


def image(args: argparse.Namespace) -> int:
    # Imported when used: it loads the Docker SDK.
    from codecoder.environments.docker.image import build_sandbox_image, default_tag, dockerfile

    try:
        text = dockerfile(args.base)
    except ValueError as exc:
        usage(str(exc))
    if args.action == "dockerfile":
        if args.json:
            print_json({"base": args.base, "dockerfile": text})
        else:
            print(text, end="")
        return EXIT_OK
    tag = args.tag or default_tag(args.base)
    if not args.json:
        print(f"building {tag} from {args.base} (the agent from codecoder-sandbox)", flush=True)
    built = build_sandbox_image(args.base, tag)
    if args.json:
        print_json({"ok": True, **built.to_json()})
    else:
        print(f"{built.tag}: {built.id}")
        if built.ready:
            print(built.ready)
        print(f'use it with "docker": {{"image": "{built.tag}"}} in codecoder.json (then trust it)')
    return EXIT_OK
