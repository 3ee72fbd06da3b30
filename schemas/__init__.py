"""Avro schemas, one .avsc per topic value; shipped as package data so an installed
`seine` finds them without the source tree."""
