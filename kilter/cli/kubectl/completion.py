"""Shell completion for ``kubectl kilter``: bash and zsh scripts generated from the argparse parser itself.

``kubectl kilter completion bash`` (or ``zsh``) prints a script to source;
it completes the views, each view's flags, the values of flags with fixed
choices (``-o``) and file names after flags that take a file. kubectl 1.26
and later complete a plugin's words by running ``kubectl_complete-kilter``
with them (the last one being the word typed so far) and reading cobra's
answer: one candidate a line, then ``:DIRECTIVE`` (4: no file completion, 0:
the shell's default, files). That executable is ``main.complete_main``; the
scripts and it read one ``spec`` of the parser, so they cannot disagree.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

__all__ = ["Spec", "add_parser", "bash_script", "candidates", "spec", "zsh_script"]

FILE_FLAGS = ("--snapshot", "--kubeconfig", "--platforms", "--health-signals", "-f", "--filename")
NO_FILES, FILES = 4, 0  # cobra's ShellCompDirectiveNoFileComp and ShellCompDirectiveDefault


class Spec:
    """Per view: its flags, and the fixed choices of the flags that have them."""

    def __init__(self) -> None:
        self.commands: dict[str, list[str]] = {}
        self.choices: dict[str, list[str]] = {}
        self.top: list[str] = []


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "completion",
        help="print a bash or zsh completion script",
        description="Print a completion script: source <(kubectl kilter completion bash), or for zsh "
        "source <(kubectl kilter completion zsh).",
    )
    p.add_argument("shell", choices=("bash", "zsh"))
    p.set_defaults(offline=run)


def spec(parser: argparse.ArgumentParser) -> Spec:
    out = Spec()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                flags: list[str] = []
                for a in sub._actions:
                    flags.extend(s for s in a.option_strings)
                    if a.choices and a.option_strings:
                        for s in a.option_strings:
                            out.choices[s] = [str(c) for c in a.choices]
                    elif a.choices and not a.option_strings:
                        out.choices[f"{name}:"] = [str(c) for c in a.choices]
                out.commands[name] = sorted(set(flags))
        else:
            out.top.extend(action.option_strings)
    return out


def candidates(s: Spec, words: Sequence[str]) -> tuple[list[str], int]:
    """What may follow ``words`` (after ``kubectl kilter``; the last is the word being typed) and a directive."""
    done, typed = list(words[:-1]), words[-1] if words else ""
    command = next((w for w in done if w in s.commands), None)
    if command is None:
        return sorted(c for c in [*s.commands, *s.top] if c.startswith(typed)), NO_FILES
    prev = done[-1] if done else ""
    if prev in FILE_FLAGS:
        return [], FILES
    if prev in s.choices:
        return [c for c in s.choices[prev] if c.startswith(typed)], NO_FILES
    positional = s.choices.get(f"{command}:", [])
    return sorted(c for c in [*s.commands[command], *positional] if c.startswith(typed)), NO_FILES


def bash_script(s: Spec) -> str:
    cases = "\n".join(
        f'        {name}) opts="{" ".join(flags + s.choices.get(name + ":", []))}" ;;'
        for name, flags in sorted(s.commands.items())
    )
    choices = "\n".join(
        f'        {flag}) COMPREPLY=($(compgen -W "{" ".join(vals)}" -- "$cur")); return ;;'
        for flag, vals in sorted(s.choices.items())
        if not flag.endswith(":")
    )
    return f"""# bash completion for kubectl-kilter (kubectl kilter completion bash)
_kubectl_kilter() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" prev="${{COMP_WORDS[COMP_CWORD-1]}}" cmd="" opts="" w
    for w in "${{COMP_WORDS[@]:1:COMP_CWORD-1}}"; do
        case "$w" in {"|".join(sorted(s.commands))}) cmd="$w"; break ;; esac
    done
    if [[ -z "$cmd" ]]; then
        COMPREPLY=($(compgen -W "{" ".join(sorted(s.commands))} {" ".join(s.top)}" -- "$cur")); return
    fi
    case "$prev" in
        {"|".join(FILE_FLAGS)}) COMPREPLY=($(compgen -f -- "$cur")); return ;;
{choices}
    esac
    case "$cmd" in
{cases}
    esac
    COMPREPLY=($(compgen -W "$opts" -- "$cur"))
}}
complete -F _kubectl_kilter kubectl-kilter
"""


def zsh_script(s: Spec) -> str:
    subs = " ".join(sorted(s.commands))
    cases = "\n".join(
        f"        {name}) opts=({' '.join(flags + s.choices.get(name + ':', []))}) ;;"
        for name, flags in sorted(s.commands.items())
    )
    choices = "\n".join(
        f"        {flag}) compadd -- {' '.join(vals)}; return ;;"
        for flag, vals in sorted(s.choices.items())
        if not flag.endswith(":")
    )
    return f"""#compdef kubectl-kilter
# zsh completion for kubectl-kilter (kubectl kilter completion zsh)
_kubectl_kilter() {{
    local cmd="" w prev="${{words[CURRENT-1]}}"
    local -a opts
    for w in "${{(@)words[2,CURRENT-1]}}"; do
        case "$w" in {"|".join(sorted(s.commands))}) cmd="$w"; break ;; esac
    done
    if [[ -z "$cmd" ]]; then compadd -- {subs} {" ".join(s.top)}; return; fi
    case "$prev" in
        {"|".join(FILE_FLAGS)}) _files; return ;;
{choices}
    esac
    case "$cmd" in
{cases}
    esac
    compadd -- "${{opts[@]}}"
}}
compdef _kubectl_kilter kubectl-kilter
"""


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    s = spec(parser)
    print(bash_script(s) if args.shell == "bash" else zsh_script(s), end="")
    return 0
