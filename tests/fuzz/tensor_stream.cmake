# The incremental tensor-stream parser (protocol/tensor_stream_parser.h): the streamed COMPOSE
# state a client parses chunk by chunk, checked against the one-shot DecodeTensorStream.
hypic_fuzz_target(tensor_stream SOURCES ../fuzz/tensor_stream_fuzz.cpp DEPS hypic::protocol)
