"""The Google Cloud backend: Cloud Datastore (google-cloud-ndb) and Cloud Tasks.

Each module is imported on its own by the composition root; importing this
package pulls in no Google library.
"""
