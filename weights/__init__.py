"""Weight manifest, download cache, checksums and converters from other formats."""
