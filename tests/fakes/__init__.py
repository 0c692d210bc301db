"""In-process fakes of external services that speak their real wire formats."""
