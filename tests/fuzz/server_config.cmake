# hypicd's configuration loader (server/config.h): the TOML file, HYPIC_* variables and flags
# all come from outside the daemon.
hypic_fuzz_target(server_config SOURCES ../fuzz/server_config_fuzz.cpp DEPS hypic::server)
