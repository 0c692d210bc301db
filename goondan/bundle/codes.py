"""Error codes a bundle can fail with. Names follow upstream Goondan so users can search them."""

from __future__ import annotations

from ipc.error_codes import ErrorCode

# Loader: reading and parsing files.
FILE_NOT_FOUND = ErrorCode.FILE_NOT_FOUND
PARSE_ERROR = ErrorCode.E_CONFIG_PARSE_ERROR
FILE_TOO_LARGE = ErrorCode.E_CONFIG_FILE_TOO_LARGE
TOO_MANY_DOCUMENTS = ErrorCode.E_CONFIG_TOO_MANY_DOCUMENTS
ENTRY_NOT_FOUND = ErrorCode.E_CONFIG_ENTRY_NOT_FOUND
PACKAGE_NOT_INSTALLED = ErrorCode.E_CONFIG_PACKAGE_NOT_INSTALLED
NOT_A_REGULAR_FILE = ErrorCode.E_CONFIG_NOT_A_REGULAR_FILE
PATH_OUTSIDE_BUNDLE = ErrorCode.E_CONFIG_PATH_OUTSIDE_BUNDLE

# Validation of the resources themselves.
UNSUPPORTED_API_VERSION = ErrorCode.E_CONFIG_UNSUPPORTED_API_VERSION
UNKNOWN_KIND = ErrorCode.E_CONFIG_UNKNOWN_KIND
INVALID_NAME = ErrorCode.E_CONFIG_INVALID_NAME
DUPLICATE_NAME = ErrorCode.E_CONFIG_DUPLICATE_NAME
INVALID_REF = ErrorCode.E_CONFIG_INVALID_REF
REF_NOT_FOUND = ErrorCode.E_CONFIG_REF_NOT_FOUND
SCHEMA_INVALID = ErrorCode.E_CONFIG_SCHEMA_INVALID
PACKAGE_DOC_POSITION = ErrorCode.E_CONFIG_PACKAGE_DOC_POSITION
PACKAGE_DOC_DUPLICATED = ErrorCode.E_CONFIG_PACKAGE_DOC_DUPLICATED

# Limits (upstream BundleLoader values).
MAX_FILE_BYTES = 1024 * 1024
MAX_DOCUMENTS = 100
# A tool, extension or connector entry, or a prompt file: code and prose, never data sets.
MAX_ENTRY_BYTES = 4 * 1024 * 1024
API_VERSION = "goondan.ai/v1"
