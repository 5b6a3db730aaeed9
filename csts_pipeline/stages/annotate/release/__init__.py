"""What a release carries besides the tables: the dataset card, soft labels, licences."""
