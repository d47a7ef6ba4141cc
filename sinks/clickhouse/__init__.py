"""History in ClickHouse: schema migrations, the Kafka -> ClickHouse sink, queries, traces."""
