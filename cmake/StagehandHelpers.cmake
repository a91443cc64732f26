# sh_cc_library(NAME n [INTERFACE] HDRS ... SRCS ... DEPS ... PRIVATE_DEPS ...)
# Defines sh_<n> and the alias stagehand::<n>.
function(sh_cc_library)
  cmake_parse_arguments(SH "INTERFACE" "NAME" "HDRS;SRCS;DEPS;PRIVATE_DEPS" ${ARGN})
  set(_t sh_${SH_NAME})
  if(SH_INTERFACE)
    add_library(${_t} INTERFACE ${SH_HDRS})
    target_include_directories(${_t} INTERFACE ${PROJECT_SOURCE_DIR})
    target_link_libraries(${_t} INTERFACE ${SH_DEPS})
  else()
    add_library(${_t} STATIC ${SH_SRCS} ${SH_HDRS})
    set_property(GLOBAL APPEND PROPERTY SH_INTERNAL_LIBRARIES ${_t})
    target_include_directories(${_t} PUBLIC ${PROJECT_SOURCE_DIR})
    target_link_libraries(${_t} PUBLIC ${SH_DEPS} PRIVATE ${SH_PRIVATE_DEPS} sh_warnings)
  endif()
  add_library(stagehand::${SH_NAME} ALIAS ${_t})
endfunction()

# sh_cc_test(NAME n SRCS ... DEPS ... LABELS unit|integration)
function(sh_cc_test)
  cmake_parse_arguments(SH "" "NAME" "SRCS;DEPS;LABELS" ${ARGN})
  add_executable(${SH_NAME} ${SH_SRCS})
  target_link_libraries(${SH_NAME} PRIVATE ${SH_DEPS} GTest::gmock_main sh_warnings)
  gtest_discover_tests(${SH_NAME} PROPERTIES LABELS "${SH_LABELS}" DISCOVERY_TIMEOUT 60)
  # `ninja unit_tests` builds every binary `ctest -L unit` runs (the tests inside a binary are
  # discovered only once it is built, so ctest cannot list them before).
  if("unit" IN_LIST SH_LABELS)
    if(NOT TARGET unit_tests)
      add_custom_target(unit_tests)
    endif()
    add_dependencies(unit_tests ${SH_NAME})
  endif()
endfunction()

# sh_find_static_archives(<archives-var> <missing-var> name...)
# Sets <archives-var> to the paths of lib<name>.a for each name, and <missing-var> to the ones not
# found. absl_base stands for every abseil archive (the linker takes only the objects something
# refers to).
function(sh_find_static_archives archives_var missing_var)
  set(_archives)
  set(_missing)
  foreach(_name ${ARGN})
    find_library(SH_STATIC_${_name} NAMES lib${_name}.a)
    if(NOT SH_STATIC_${_name})
      list(APPEND _missing lib${_name}.a)
    elseif(_name STREQUAL "absl_base")
      get_filename_component(_dir ${SH_STATIC_absl_base} DIRECTORY)
      file(GLOB _absl ${_dir}/libabsl_*.a)
      list(APPEND _archives ${_absl})
    else()
      list(APPEND _archives ${SH_STATIC_${_name}})
    endif()
  endforeach()
  list(REMOVE_DUPLICATES _archives)
  set(${archives_var} ${_archives} PARENT_SCOPE)
  set(${missing_var} ${_missing} PARENT_SCOPE)
endfunction()

# sh_link_session_statically(target)
# Links the session binary with static archives of protobuf, abseil, libiscsi, liburing (and
# libstdc++): the agent starts one session process per staged volume, and the dynamic loader
# mapping and relocating ~40 shared libraries took ~8 ms of every stage on the development VM
# (bench/README.md, stage latency). glibc and libiscsi's RDMA libraries stay shared. Falls back
# to ordinary dynamic linking where an archive is missing (STAGEHAND_STATIC_SESSION=OFF forces it)
# and in sanitizer builds. Nothing that needs a shared C++ library (spdlog, fmt) may be linked:
# it would load a second C++ runtime next to the static one.
option(STAGEHAND_STATIC_SESSION "Link stagehand-session against static archives" ON)
function(sh_link_session_statically target)
  set(_deps sh_session sh_session_protocol sh_iscsi sh_proto_state sh_base)
  sh_find_static_archives(_archives _missing protobuf iscsi uring absl_base)
  find_library(SH_IBVERBS NAMES ibverbs libibverbs.so.1)
  find_library(SH_RDMACM NAMES rdmacm librdmacm.so.1)
  if(NOT SH_IBVERBS OR NOT SH_RDMACM)
    list(APPEND _missing "libibverbs/librdmacm")
  endif()
  if(SH_SANITIZE)
    list(APPEND _missing "none, but sanitizer builds keep the shared C++ runtime")
  endif()
  if(NOT STAGEHAND_STATIC_SESSION OR _missing)
    if(STAGEHAND_STATIC_SESSION)
      message(STATUS "stagehand-session linked dynamically (missing: ${_missing})")
    endif()
    target_link_libraries(${target} PRIVATE stagehand::session sh_warnings)
    return()
  endif()
  # Compile with the usage requirements of what it links, link the archives instead of the
  # shared libraries those requirements name.
  foreach(_prop INCLUDE_DIRECTORIES COMPILE_DEFINITIONS COMPILE_OPTIONS)
    set(_value)
    foreach(_dep ${_deps})
      list(APPEND _value $<TARGET_PROPERTY:${_dep},INTERFACE_${_prop}>)
    endforeach()
    set_property(TARGET ${target} APPEND PROPERTY ${_prop} ${_value})
  endforeach()
  set(_files)
  foreach(_dep ${_deps})
    list(APPEND _files $<TARGET_FILE:${_dep}>)
  endforeach()
  add_dependencies(${target} ${_deps})
  set_property(GLOBAL PROPERTY SH_SESSION_STATIC ON)
  target_link_libraries(${target} PRIVATE sh_warnings
    -Wl,--start-group ${_files} ${_archives} -Wl,--end-group
    -Wl,--as-needed ${SH_IBVERBS} ${SH_RDMACM} Threads::Threads ${CMAKE_DL_LIBS}
    -static-libstdc++ -static-libgcc)
endfunction()

# sh_link_grpc_statically(target)
# Links gRPC (its build without TLS: every gRPC endpoint of ours is a unix socket), protobuf and
# abseil into `target` from their static archives instead of ~60 shared libraries: the linker
# takes only what is used, and nothing is relocated at start. The agent's idle RSS fell from
# 23 to 16 MB, with 1000 volumes from 28 to 22 MB (bench/README.md, footprint). The archives
# come first on the link line and --as-needed drops the shared libraries they replace. Falls
# back to dynamic linking where an archive is missing, with STAGEHAND_STATIC_GRPC=OFF and in
# sanitizer builds. Our own archives (every library defined so far) go in the same group, so
# that none of their references reaches a shared gRPC; a POST_BUILD check fails the build if one
# is still needed (two copies of gRPC in one process).
option(STAGEHAND_STATIC_GRPC "Link the agent against static archives of gRPC, protobuf, abseil"
       ON)
function(sh_link_grpc_statically target)
  sh_find_static_archives(_archives _missing grpc++_unsecure grpc_unsecure gpr upb
                          address_sorting re2 cares protobuf absl_base)
  if(SH_SANITIZE)
    list(APPEND _missing "none, but sanitizer builds link the shared libraries")
  endif()
  if(NOT STAGEHAND_STATIC_GRPC OR _missing)
    if(STAGEHAND_STATIC_GRPC)
      message(STATUS "${target} linked against shared gRPC (missing: ${_missing})")
    endif()
    return()
  endif()
  get_property(_ours GLOBAL PROPERTY SH_INTERNAL_LIBRARIES)
  target_link_options(${target} PRIVATE -Wl,--as-needed)
  target_link_libraries(${target} PRIVATE -Wl,--start-group ${_ours} ${_archives} -Wl,--end-group)
  add_custom_command(TARGET ${target} POST_BUILD
    COMMAND ${CMAKE_COMMAND} -DBINARY=$<TARGET_FILE:${target}>
            -P ${PROJECT_SOURCE_DIR}/cmake/CheckStaticGrpc.cmake
    VERBATIM)
endfunction()
