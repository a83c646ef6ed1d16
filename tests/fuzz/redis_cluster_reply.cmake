# The Redis Cluster reply parsers (storage/redis_cluster.h): CLUSTER SLOTS and MOVED/ASK, on RESP.
hypic_fuzz_target(redis_cluster_reply SOURCES ../fuzz/redis_cluster_reply_fuzz.cpp
                  DEPS hypic::storage PkgConfig::HIREDIS)
