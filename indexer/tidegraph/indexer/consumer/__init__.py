"""The live driver: a Kafka consumer group applying document versions record by record."""
