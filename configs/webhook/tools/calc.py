"""Quickstart tool: arithmetic."""


def add(ctx, args):
    return {"sum": args["a"] + args["b"]}


def multiply(ctx, args):
    return {"product": args["a"] * args["b"]}


handlers = {"add": add, "multiply": multiply}
