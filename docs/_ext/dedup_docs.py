"""Sphinx extension of the scrapy-dedup manual.

- ``.. setting:: NAME`` marks a setting's entry and ``:setting:`NAME``` links to it (the way
  Scrapy's and scrapy-zyte-api's manuals document settings).
- ``.. dedup-command:: NAME`` renders one ``scrapy dedup`` subcommand from the command's own
  argument parser: its synopsis, what it does, and every option that applies to it, so the page
  cannot drift from the code.  ``.. dedup-command-common::`` renders the options every
  subcommand takes.
"""

from __future__ import annotations

import argparse
from typing import Any

from docutils import nodes
from sphinx.util.docutils import SphinxDirective


def command_parser() -> tuple[argparse.ArgumentParser, dict[str, str], dict[str, tuple[str, ...]]]:
    from scrapy.settings import Settings

    from scrapy_dedup.commands.dedup import SCOPED, SUBCOMMANDS, Command

    parser = argparse.ArgumentParser(prog="scrapy dedup", add_help=False)
    command = Command()
    command.settings = Settings()  # Scrapy's global options read LOG_LEVEL from it
    command.add_options(parser)
    return parser, SUBCOMMANDS, SCOPED


def _group(parser: argparse.ArgumentParser, title: str) -> list[argparse.Action]:
    for group in parser._action_groups:
        if group.title == title:
            return list(group._group_actions)
    raise LookupError(f"the scrapy dedup parser has no option group {title!r}")


def _option_term(action: argparse.Action) -> str:
    if not action.option_strings:
        return (action.metavar or action.dest).upper()
    takes_value = action.nargs != 0
    metavar = action.metavar or (action.dest.upper() if takes_value and not action.choices else None)
    if action.choices and takes_value and not action.metavar:
        metavar = "{" + ",".join(map(str, action.choices)) + "}"
    return ", ".join(f"{opt} {metavar}" if metavar else opt for opt in action.option_strings)


def _help(action: argparse.Action, subcommands: dict[str, str]) -> str:
    text = (action.help or "").strip()
    # "aliases, provenance: only URLs of this host" -> "only URLs of this host" on each subcommand's entry
    head, sep, rest = text.partition(": ")
    if sep and all(name.strip() in subcommands for name in head.split(",")):
        text = rest
    text = text[:1].upper() + text[1:]
    if getattr(action, "type", None) is not None and getattr(action.type, "__name__", "") == "_positive":
        text += " (a whole number, at least 1)"
    if isinstance(action, argparse._AppendAction) and "repeatable" not in text:
        text += " (repeatable)"
    return text


def _definitions(items: list[tuple[str, str]]) -> nodes.definition_list:
    dl = nodes.definition_list()
    for term, text in items:
        item = nodes.definition_list_item()
        item += nodes.term("", "", nodes.literal(text=term))
        item += nodes.definition("", nodes.paragraph(text=text))
        dl += item
    return dl


class DedupCommand(SphinxDirective):
    """One subcommand of ``scrapy dedup``, rendered from the parser."""

    required_arguments = 1
    has_content = False

    def run(self) -> list[nodes.Node]:
        name = self.arguments[0]
        parser, subcommands, scoped = command_parser()
        if name not in subcommands:
            raise self.error(f"scrapy dedup has no subcommand {name!r} (it has {', '.join(subcommands)})")
        positional = {"lookup": " URL", "ingest": " FILE.jsonl"}.get(name, "") if name in scoped["url"] else ""
        synopsis = f"scrapy dedup {name}{positional} [--spider NAME | --store PATH] [options]"
        described = subcommands[name]
        out: list[nodes.Node] = [
            nodes.literal_block(synopsis, synopsis, language="text"),
            nodes.paragraph(text=described[:1].upper() + described[1:] + "."),
        ]
        options = [
            (_option_term(a), _help(a, subcommands))
            for a in _group(parser, "Subcommand options")
            if name in scoped.get(a.dest, ())
        ]
        if options:
            out.append(nodes.paragraph(text="Options of this subcommand:"))
            out.append(_definitions(options))
        return out


class DedupCommandCommon(SphinxDirective):
    """The options every subcommand takes (where the store is, the output format)."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        parser, subcommands, _ = command_parser()
        actions = _group(parser, "Store") + _group(parser, "Output")
        return [_definitions([(_option_term(a), _help(a, subcommands)) for a in actions])]


def setup(app: Any) -> dict[str, Any]:
    app.add_crossref_type("setting", "setting", indextemplate="pair: %s; setting")
    app.add_directive("dedup-command", DedupCommand)
    app.add_directive("dedup-command-common", DedupCommandCommon)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
