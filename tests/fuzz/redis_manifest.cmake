# The remote tier's manifest parser (storage/redis_manifest.h): bytes read back from Redis.
hypic_fuzz_target(redis_manifest SOURCES ../fuzz/redis_manifest_fuzz.cpp DEPS hypic::storage)
