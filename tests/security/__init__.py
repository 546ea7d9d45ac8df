"""Security tests: Entra sign-in against a local issuer, bounds, and redaction."""
