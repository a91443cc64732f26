# cmake -DBINARY=<file> -P CheckStaticGrpc.cmake
# Fails when BINARY, linked with sh_link_grpc_statically, still needs a shared library it links
# statically (gRPC and its re2, c-ares, address_sorting; protobuf; abseil): the process would
# hold two copies of it.
file(GET_RUNTIME_DEPENDENCIES EXECUTABLES ${BINARY} RESOLVED_DEPENDENCIES_VAR _deps
     UNRESOLVED_DEPENDENCIES_VAR _unresolved)
foreach(_dep ${_deps} ${_unresolved})
  get_filename_component(_name ${_dep} NAME)
  if(_name MATCHES "^lib(grpc|gpr|protobuf|absl_|upb|re2|cares|address_sorting)")
    message(FATAL_ERROR "${BINARY} needs ${_name} although gRPC, protobuf and abseil are linked "
                        "statically: a library of ours is missing from the static group")
  endif()
endforeach()
