# The remote store URL (storage/redis_client.h): redis:// and redis-cluster://, with auth.
hypic_fuzz_target(redis_url SOURCES ../fuzz/redis_url_fuzz.cpp DEPS hypic::storage)
