"""@acme/search: this directory holds the package's goondan.yaml and its entries.

goondan never imports this module: it only finds its directory through the
`goondan.packages` entry point, and its agent processes load the entries listed there.
"""
