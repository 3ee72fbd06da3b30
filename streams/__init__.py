"""Seine: a web crawler for search indexing, built as Faust stages on Kafka."""
