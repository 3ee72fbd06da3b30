"""The Faust agents: thin loops over streams.core."""
