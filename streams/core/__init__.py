"""Pure crawl logic: no Kafka imports here, so every piece is unit-testable on its own."""
