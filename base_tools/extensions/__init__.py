"""The built-in Extensions of `@goondan/base` (declared in `base_tools/extensions.yaml`)."""
