--- seer.backends.docker: a sandbox in a docker container on this machine (or on the daemon
--- `docker.host` names). The podman backend's code with docker's commands
--- (seer.backends.podman.flavour; docs/backends.md, Containers).
---@class seerbackends.docker
return require("seer.backends.podman").flavour("docker")
