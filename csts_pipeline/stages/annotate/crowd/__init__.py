"""The crowd platforms: task files, HIT pages, MTurk and Label Studio formats, reading and screening what comes
back, hidden gold controls."""
