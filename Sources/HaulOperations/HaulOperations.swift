// HaulOperations: the asynchronous Operation done right. Sources arrive with the Foundation issue.
