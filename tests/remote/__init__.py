"""Remote-store tests: an S3-compatible server (moto, in its own process), a static HTTP server
and a fault-injection proxy, all on 127.0.0.1, all stopped by the fixtures that start them."""
