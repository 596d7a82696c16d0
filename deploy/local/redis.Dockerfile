# Redis from Debian's package, for hosts that reach no image registry (`make deploy-test` builds
# it on its mmdebstrap base): docker-compose.yml's `redis` service with REDIS_IMAGE set to it.
# The compose file passes every setting on the command line, so the package's config is unused.
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /data
WORKDIR /data
EXPOSE 6379
CMD ["redis-server"]
