# SecantusDB (a MongoDB-wire server, from the service image's venv: the version paiq pins) standing in
# for the official `mongo` image in the compose test (no registry is reachable here). Same contract:
# port 27017, data in /data/db, a root user from MONGO_INITDB_ROOT_USERNAME / _PASSWORD created on
# first start, authentication required afterwards.
ARG SERVICE_IMAGE=paiq/paiq:test
FROM ${SERVICE_IMAGE}
USER root
COPY secantusdb-entrypoint.sh /usr/local/bin/secantusdb-entrypoint
RUN chmod 0755 /usr/local/bin/secantusdb-entrypoint \
 && mkdir -p /data/db && chown paiq:paiq /data/db
USER paiq
VOLUME /data/db
EXPOSE 27017
HEALTHCHECK --interval=5s --timeout=5s --start-period=20s --retries=5 CMD ["python", "-c", "import pymongo; pymongo.MongoClient('mongodb://127.0.0.1:27017/?directConnection=true', serverSelectionTimeoutMS=3000).admin.command('ping')"]
ENTRYPOINT ["tini", "--", "secantusdb-entrypoint"]
CMD ["--cache-size", "256M"]
