"""A catalogue of hostile HTTP endpoints on loopback, for the fetcher's tests."""
