"""HTTP endpoints served by a worker's Faust web server (aiohttp, localhost by default)."""
